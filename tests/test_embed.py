"""The embedding models: the bundled one loads from the wheel's files without the network; the
OpenAI-compatible endpoint (tests/fakes/openai_api.py) is used when it answers and falls back when not."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bot.config import Settings
from bot.errors import EmbeddingError
from bot.search import embed
from bot.search.embed import BUNDLED_NAME, RemoteModel, StaticModel, bundled_files, load
from tests.fakes.openai_api import EMBEDDING_DIM, FakeOpenAI

ROOT = Path(__file__).resolve().parent.parent


def settings(**env: str) -> Settings:
    return Settings.from_env(env)


def test_the_bundled_model_loads_and_embeds_with_no_network_at_all() -> None:
    """In a fresh interpreter whose every socket is refused (an audit hook), with no Hugging Face cache."""
    script = textwrap.dedent("""
        import sys
        def refuse(event, args):
            if event.startswith("socket.") and event not in ("socket.gethostname",):
                raise RuntimeError("network used: " + event)
        sys.addaudithook(refuse)
        from bot.search.embed import StaticModel
        model = StaticModel.bundled()
        vectors = model.embed(["large language models on device", "speech recognition"])
        print(model.name, vectors.shape)
    """)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": "/nonexistent",
           "HF_HOME": "/nonexistent"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == BUNDLED_NAME and "(2, 256)" in proc.stdout


def test_vectors_are_unit_length_and_near_for_near_texts() -> None:
    model = StaticModel.bundled()
    a, b, c = model.embed(["speech recognition for Siri", "recognizing spoken words", "3D Gaussian heads"])
    assert np.allclose([np.linalg.norm(v) for v in (a, b, c)], 1.0, atol=1e-5)
    assert a @ b > a @ c
    assert model.embed([""]).shape == (1, 256)  # an empty text is a zero vector, not an error
    assert model.embed([]).shape == (0, 256)


def test_a_model_file_that_fails_to_load_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "weights.safetensors"
    broken.write_bytes(b"not a model")
    with pytest.raises(EmbeddingError) as caught:
        StaticModel(broken, bundled_files()[1])
    assert "\n" not in str(caught.value) and "could not be loaded" in str(caught.value)


def test_the_endpoint_is_used_when_it_answers() -> None:
    with FakeOpenAI() as api:
        model = load(settings(EMBEDDINGS_API_URL=api.url, EMBEDDINGS_API_KEY="k", EMBEDDINGS_MODEL="m1"))
        assert isinstance(model, RemoteModel) and model.name == "api:m1"
        vectors = model.embed(["abc", "hhh"] * 40)  # more than one request's worth
        assert vectors.shape == (80, EMBEDDING_DIM)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
        request = api.requests[-1]
        assert request["path"] == "/v1/embeddings" and request["body"]["model"] == "m1"
        assert request["headers"]["Authorization"] == "Bearer k"


@pytest.mark.parametrize("script", [{"status": 500}, {"raw": b"{not json"}, {"raw": b'{"data": [1]}'}])
def test_an_endpoint_that_fails_falls_back_to_the_bundled_model(script: dict, caplog) -> None:
    with FakeOpenAI(**script) as api:
        model = load(settings(EMBEDDINGS_API_URL=api.url))
    assert model.name == BUNDLED_NAME
    [record] = [r for r in caplog.records if "embeddings_fallback" in r.getMessage()]
    assert "\n" not in record.getMessage()


def test_a_slow_endpoint_times_out_in_one_line() -> None:
    with FakeOpenAI(delay=5) as api, pytest.raises(EmbeddingError) as caught:
        RemoteModel(api.url, None, None, timeout=0.3).embed(["text"])
    assert "0.3 s" in str(caught.value)


def test_an_embeddings_url_must_be_http() -> None:
    from bot.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        settings(EMBEDDINGS_API_URL="ftp://example.com")
    assert caught.value.variable == "EMBEDDINGS_API_URL"


def test_serve_starts_without_numpy_or_the_embedding_model(tmp_path: Path) -> None:
    from tests.test_lazy_imports import modules_imported

    loaded = modules_imported("-c", "import bot.server", cwd=tmp_path)
    assert "bot.search.index" in loaded
    assert loaded & {"numpy", "bot.search.embed", "bot.search.vectors", "bot.search.hybrid", "safetensors",
                     "tokenizers", "wordllama"} == set()


def test_the_bundled_table_is_mapped_from_its_file_and_reads_as_safetensors_does() -> None:
    from safetensors import safe_open

    weights, _ = embed.bundled_files()
    mapped = embed.mapped_table(weights, "embedding.weight")
    with safe_open(str(weights), framework="np") as f:
        read = f.get_tensor("embedding.weight")
    assert isinstance(mapped, np.memmap) and mapped.dtype == read.dtype and mapped.shape == read.shape
    assert np.array_equal(mapped, read)


def resident_kb(path: Path) -> int:
    """How much of the file at `path` this process's mappings hold resident (/proc/self/smaps), in kB."""
    total, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"[0-9a-f]+-[0-9a-f]+ ", line):  # a mapping's first line: addresses, ..., its file
            current = line.rstrip().endswith(str(path))
        elif current and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_the_rows_a_text_used_do_not_stay_resident() -> None:
    weights, tokenizer = embed.bundled_files()
    model = embed.StaticModel(weights, tokenizer)
    text = " ".join(f"zq{n}x vorpal{n} kalomi{n}" for n in range(300))  # a few thousand distinct tokens
    vectors = model.embed([text, "on-device speech recognition"])
    assert vectors.shape == (2, model.dim) and np.isfinite(vectors).all()
    assert resident_kb(weights) == 0
    assert np.array_equal(model.embed(["on-device speech recognition"])[0], vectors[1])  # read again at once


def test_a_weights_file_that_is_not_safetensors_is_one_line(tmp_path: Path) -> None:
    _, tokenizer = embed.bundled_files()
    bad = tmp_path / "weights.safetensors"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(EmbeddingError) as caught:
        embed.StaticModel(bad, tokenizer)
    assert "could not be loaded" in str(caught.value) and "\n" not in str(caught.value)
