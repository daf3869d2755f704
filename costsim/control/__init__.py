"""`costsim control`: carry out a plan's spot/on-demand policy while the job runs (docs/control.md).

Never imports torch: the runner (`runner execute`, one process per instance) alone trains.
"""
