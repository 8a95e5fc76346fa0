import os

import pytest
import torch

# Without a GPU, Triton kernels run in its interpreter, which must be chosen before
# triton is first imported (torch imports it as soon as a model is loaded).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct, float32 on the CPU (converted once and cached)."""
    from live.runner.models import load_model
    return load_model(None)
