"""Converting a GGUF once into the cache: the message, the atomic write, the reuse.
The conversion itself is faked here; tests/test_runner_smollm2.py loads the real one."""
import pytest

import live.runner.models as models


class FakeConverted:
    """Stands in for a model or tokenizer from a GGUF; `fail` interrupts the save."""

    fail = False

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        return cls()

    def save_pretrained(self, directory):
        (directory / f"{type(self).__name__}.json").write_text("{}")
        if self.fail:
            raise KeyboardInterrupt


@pytest.fixture
def fake_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINSTEP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "AutoModelForCausalLM", FakeConverted)
    monkeypatch.setattr(models, "AutoTokenizer", type("FakeTokenizer", (FakeConverted,), {}))
    path = tmp_path / models.EMBEDDED_GGUF
    path.write_bytes(b"GGUF")
    return path


def test_first_use_converts_once_and_says_so(fake_gguf, capsys):
    target = models.gguf_cache(fake_gguf)
    assert "converting the embedded SmolLM2 GGUF once to" in capsys.readouterr().err
    assert target == models.cache_root() / "SmolLM2-135M-Instruct.Q4_1"
    assert {p.name for p in target.iterdir()} == {"FakeConverted.json", "FakeTokenizer.json"}

    assert models.gguf_cache(fake_gguf) == target
    assert capsys.readouterr().err == ""


def test_an_interrupted_conversion_leaves_nothing_to_use(fake_gguf, monkeypatch):
    monkeypatch.setattr(FakeConverted, "fail", True)
    with pytest.raises(KeyboardInterrupt):
        models.gguf_cache(fake_gguf)
    assert list(models.cache_root().iterdir()) == []  # neither the target nor a staging dir

    monkeypatch.setattr(FakeConverted, "fail", False)
    assert models.gguf_cache(fake_gguf).is_dir()


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("TWINSTEP_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert models.cache_root() == tmp_path / "twinstep"
    monkeypatch.setenv("TWINSTEP_CACHE", str(tmp_path / "mine"))
    assert models.cache_root() == tmp_path / "mine"
