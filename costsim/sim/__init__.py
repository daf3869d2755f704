"""SimPy dynamics of a training job: the spot market and the job process (the policies they ask are costsim.policies)."""
