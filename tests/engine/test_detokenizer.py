import random

import pytest

from live.engine.detokenizer import TextStream, decoder_of

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


def test_the_fast_decoder_decodes_as_the_tokenizer_does(tok):
    # the Rust tokenizer's decode, called at once, against transformers' around it
    decode = decoder_of(tok)
    assert decode.func == tok.backend_tokenizer.decode
    special = sorted(tok.all_special_ids)
    rng = random.Random(3)
    ids = tok.encode(TEXT, add_special_tokens=False)
    for _ in range(200):
        chosen = [rng.choice(ids + special) for _ in range(rng.randint(1, 12))]
        chosen += [rng.randrange(len(tok)) for _ in range(rng.randint(0, 4))]
        assert decode(chosen) == tok.decode(chosen, skip_special_tokens=True)


def test_a_tokenizer_that_cleans_up_spaces_keeps_its_own_decode(tok):
    class CleaningUp:
        backend_tokenizer = tok.backend_tokenizer
        clean_up_tokenization_spaces = True

        def decode(self, ids, skip_special_tokens):
            return f"cleaned {ids} {skip_special_tokens}"
    assert decoder_of(CleaningUp())([1, 2]) == "cleaned [1, 2] True"


def test_the_rust_incremental_decoder_makes_the_deltas_the_window_decodes_make(tok):
    class Windowed:  # no Rust tokenizer: two decodes of a window a token
        def decode(self, ids, skip_special_tokens):
            return tok.decode(ids, skip_special_tokens=skip_special_tokens)
    special = sorted(tok.all_special_ids)
    rng = random.Random(5)
    ids = tok.encode(TEXT, add_special_tokens=False)
    for _ in range(100):
        prompt = tuple(rng.choice(ids) for _ in range(rng.randint(0, 6)))
        made = [rng.choice(ids + special) for _ in range(rng.randint(1, 30))]
        made += [rng.randrange(len(tok)) for _ in range(rng.randint(0, 3))]
        stop = (rng.choice(["ü", " a", "🙂", "END"]),) if rng.random() < 0.5 else ()
        fast, slow = TextStream(tok, prompt, stop), TextStream(Windowed(), prompt, stop)
        whole = not tok.decode(prompt[-4:]).endswith("\ufffd")
        assert (fast._stepper is not None) == whole and slow._stepper is None
        assert [fast.push(i) for i in made] == [slow.push(i) for i in made]
        assert fast.flush() == slow.flush() and fast.stopped == slow.stopped
