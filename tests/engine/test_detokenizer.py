import pytest

from live.engine.detokenizer import TextStream

TEXT = "Grüße aus Köln: 日本語のテキスト, emoji 🙂🚀 and naïve café — done."


@pytest.fixture(scope="module")
def tok(smollm2):
    return smollm2.tokenizer


def stream_deltas(tok, ids, stop=()):
    text = TextStream(tok, (), stop)
    deltas = [text.push(i) for i in ids]
    return text, deltas


def test_multibyte_characters_split_across_tokens_never_leak_half(tok):
    ids = tok.encode(TEXT, add_special_tokens=False)
    # the tokenizer is byte-level: some characters must span several tokens
    assert any("\ufffd" in tok.decode([i]) for i in ids)
    text, deltas = stream_deltas(tok, ids)
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) + text.flush() == tok.decode(ids) == TEXT
    # the first delta after an incomplete character carries all of it
    assert "🙂" in "".join(deltas)


def test_stop_string_across_token_boundaries_is_cut_and_never_emitted(tok):
    ids = tok.encode("The answer is 42. END of story", add_special_tokens=False)
    text, deltas = stream_deltas(tok, ids, stop=("D of",))
    assert text.stopped
    assert "".join(deltas) == "The answer is 42. EN"
    assert text.flush() == ""
    # once stopped, later tokens add nothing
    assert text.push(ids[0]) == "" and text.text == "The answer is 42. EN"


def test_text_that_only_looks_like_a_stop_prefix_is_released(tok):
    ids = tok.encode("one ENDS two EN", add_special_tokens=False)
    text, deltas = stream_deltas(tok, ids, stop=("END.",))
    assert not text.stopped
    # "EN" at the end may still become "END.": held back until the end, then released
    assert "".join(deltas) == "one ENDS two "
    assert text.flush() == "EN"


def test_stop_on_a_multibyte_string(tok):
    ids = tok.encode("abc 🙂 def", add_special_tokens=False)
    text, deltas = stream_deltas(tok, ids, stop=("🙂",))
    assert text.stopped and "".join(deltas) == "abc "
