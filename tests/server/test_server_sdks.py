"""The official `openai` and `anthropic` SDKs against the server on the embedded
SmolLM2: streaming and not, each answer equal to what the engine makes alone."""
import anthropic
import openai
import pytest

from engine_helpers import run_engine
from live.engine.engine import Engine
from live.runner.model_runner import ModelRunner
from scheduler.settings import ServeSettings
from live.server.app import create_app
from live.server.validation import ServedModel
from live_server import running_server, wait_idle
from scheduler import SchedulerConfig

NEW = 12
MESSAGES = [{"role": "user", "content": "Name three colors."}]


def _engine(smollm2):
    runner = ModelRunner(smollm2.model, num_blocks=128, block_size=16)
    config = SchedulerConfig(num_blocks=128, block_size=16, max_batch=4,
                             max_model_len=smollm2.max_model_len)
    return Engine(runner, smollm2.tokenizer, config), runner.vocab_size


@pytest.fixture(scope="module")
def served(smollm2):
    engine, vocab = _engine(smollm2)
    model = ServedModel(smollm2.name, smollm2.tokenizer, smollm2.max_model_len, vocab)
    with running_server(create_app(engine, model, ServeSettings())) as url:
        yield url, model
        wait_idle(url)
    assert engine.core.is_drained()


@pytest.fixture(scope="module")
def alone(smollm2):
    """Greedy text for prompt ids, from an engine with nothing else to do."""
    engine, _ = _engine(smollm2)

    def run(prompt_ids, new=NEW):
        _, texts, finished = run_engine(engine, {0: [("ref", list(prompt_ids), new)]})
        return texts["ref"], finished["ref"]
    return run


def test_openai_chat_completions_stream_and_not(served, alone):
    url, model = served
    prompt_ids = model.chat_prompt(MESSAGES)
    text, finished = alone(prompt_ids)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
    answer = client.chat.completions.create(model=model.name, messages=MESSAGES,
                                            max_tokens=NEW, temperature=0)
    assert answer.choices[0].message.content == text
    assert answer.usage.completion_tokens == finished.num_generated
    chunks = list(client.chat.completions.create(
        model="default", messages=MESSAGES, max_completion_tokens=NEW, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == finished.num_generated
    assert chunks[-1].usage.prompt_tokens == len(prompt_ids)
    assert [m.id for m in client.models.list()] == [model.name]


def test_openai_completions_stream_and_not(served, alone):
    url, model = served
    prompt = "The three primary colors are"
    text, _ = alone(model.encode(prompt))
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="x")
    answer = client.completions.create(model=model.name, prompt=prompt, max_tokens=NEW,
                                       temperature=0)
    assert answer.choices[0].text == text
    chunks = list(client.completions.create(model=model.name, prompt=prompt, max_tokens=NEW,
                                            temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == text


def test_anthropic_messages_stream_and_not(served, alone):
    url, model = served
    system = "You answer in one line."
    text, finished = alone(model.chat_prompt([{"role": "system", "content": system}, *MESSAGES]))
    client = anthropic.Anthropic(base_url=url, api_key="x")
    # this SDK has no sampling arguments; Anthropic's default temperature is 1
    greedy = {"extra_body": {"temperature": 0}}
    message = client.messages.create(model=model.name, system=system, messages=MESSAGES,
                                     max_tokens=NEW, **greedy)
    assert message.content[0].text == text
    assert message.usage.output_tokens == finished.num_generated
    with client.messages.stream(model=model.name, system=system, messages=MESSAGES,
                                max_tokens=NEW, **greedy) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens == finished.num_generated


def test_sdk_errors_arrive_as_the_sdks_exceptions(served):
    url, model = served
    with pytest.raises(openai.NotFoundError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="x").chat.completions.create(
            model="not-this-one", messages=MESSAGES, max_tokens=4)
    with pytest.raises(anthropic.BadRequestError):
        anthropic.Anthropic(base_url=url, api_key="x").messages.create(
            model=model.name, messages=[], max_tokens=4)
