import pytest


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct, float32 on the CPU (converted once and cached)."""
    from live.models import load_model
    return load_model(None)
