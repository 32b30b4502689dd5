"""Settings for the IR tests: hypothesis runs a moderate number of examples, no deadline."""
from hypothesis import HealthCheck, settings

settings.register_profile("ir", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ir")
