"""SimPy dynamics of a training job: spot market, recovery policies, the job process."""
