"""costsim: plan, cost and calibrate GPU training jobs across spot, on-demand and owned hardware."""

__version__ = "0.1.0"
