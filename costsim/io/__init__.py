"""The edge: files in and out. Nothing outside this package parses."""

from costsim.io.files import data_dir, read_json, read_jsonl, read_yaml, resolve, sha256_file, write_atomic
from costsim.io.specs import (
                              load_fitted_spot_models,
                              load_offerings,
                              load_profile,
                              load_profile_for,
                              load_skus,
                              load_spot_models,
                              load_trace,
                              load_workload,
                              owned_offering,
)

__all__ = ["data_dir", "read_json", "read_jsonl", "read_yaml", "resolve", "sha256_file", "write_atomic",
           "load_fitted_spot_models", "load_offerings", "load_profile", "load_profile_for", "load_skus", "load_spot_models",
           "load_trace", "load_workload", "owned_offering"]
