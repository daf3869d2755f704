"""The contracts between the commands: plan.json (`plan`), a run folder's telemetry and summary
(`telemetry`), and the JSON file helpers both use (`jsonfiles`).

Everything here imports only the standard library and costsim's own small modules: no SimPy, scipy,
yaml or torch. The planner writes through it; the runner's workers, `costsim calibrate`, `control`
and `export` read through it.
"""
