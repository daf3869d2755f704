"""A team's demand over months and the SimPy fleet model that serves it under each strategy."""
