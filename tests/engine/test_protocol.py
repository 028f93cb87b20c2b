"""Request validation (vLLM error bodies) and vLLM-shaped response building."""

from __future__ import annotations

import pytest
from engines import make_engine
from refengine import protocol, tokenizer
from refengine.config import EngineConfig

CFG = EngineConfig(model="/models/tiny", served_model_name="tiny", max_model_len=256)


def _err(body) -> protocol.APIError:
    with pytest.raises(protocol.APIError) as exc:
        protocol.parse_completion(body, CFG)
    return exc.value


def test_tokenizer_roundtrip_and_unique_token_strings() -> None:
    assert tokenizer.decode(tokenizer.encode("héllo")) == "héllo"
    strs = [tokenizer.token_str(i) for i in range(tokenizer.VOCAB_SIZE)]
    assert len(set(strs)) == tokenizer.VOCAB_SIZE
    assert tokenizer.token_str(65) == "A" and tokenizer.token_str(10) == "<0x0A>"
    assert tokenizer.decode([72, 105, tokenizer.EOS_ID]) == "Hi"


def test_logprobs_cap_error_matches_vllm() -> None:
    e = _err({"prompt": "x", "logprobs": 25, "temperature": 0})
    assert e.status == 400
    assert e.body() == {"error": {
        "message": "Requested sample logprobs of 25, which is greater than max allowed: 20",
        "type": "BadRequestError", "param": "logprobs", "code": 400}}
    e = _err({"prompt": "x", "prompt_logprobs": 21})
    assert e.body()["error"]["message"] == "Requested prompt logprobs of 21, which is greater than max allowed: 20"
    assert e.param == "prompt_logprobs"


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"prompt": "x", "model": "other"}, 404),
        ({"prompt": 5}, 400),
        ({"prompt": ["a", "b"]}, 400),
        ({"prompt": ""}, 400),
        ({"prompt": [1, 999]}, 400),
        ({"prompt": "x", "n": 2}, 400),
        ({"prompt": "x", "temperature": 3}, 400),
        ({"prompt": "x", "temperature": "hot"}, 400),
        ({"prompt": "x", "max_tokens": "9"}, 400),
        ({"prompt": "x", "echo": "yes"}, 400),
        ({"prompt": "x" * 300}, 400),
        ({"prompt": "x" * 250, "max_tokens": 10}, 400),
        ({"max_tokens": 3}, 400),
        ([1, 2], 400),
    ],
)
def test_invalid_requests(body, status) -> None:
    assert _err(body).status == status
    assert set(_err(body).body()["error"]) == {"message", "type", "param", "code"}


def test_valid_prompt_forms() -> None:
    for prompt in ("Hi", ["Hi"], [72, 105], [[72, 105]]):
        req, _ = protocol.parse_completion({"prompt": prompt, "model": "tiny"}, CFG)
        assert req.prompt_ids == [72, 105] and req.max_tokens == 16
    req, _ = protocol.parse_completion({"prompt": "Hi", "model": "/models/tiny", "temperature": 0}, CFG)
    assert req.temperature == 0.0


def _complete(body):
    eng = make_engine(max_model_len=256, served_model_name="tiny")
    req, opts = protocol.parse_completion(body, eng.cfg)
    res = eng.run_batch([req])[0]
    return req, protocol.build_response("cmpl-x", "tiny", req, opts, res)


def test_response_shape_with_logprobs() -> None:
    _, r = _complete({"prompt": "Hello there", "max_tokens": 5, "temperature": 0, "logprobs": 3})
    assert r["object"] == "text_completion" and r["model"] == "tiny" and r["id"].startswith("cmpl-")
    assert r["usage"] == {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16,
                          "prompt_tokens_details": {"cached_tokens": 0}}  # no prefix cache: none cached
    (c,) = r["choices"]
    assert c["index"] == 0 and c["finish_reason"] == "length" and c["stop_reason"] is None
    assert c["prompt_logprobs"] is None and "token_ids" not in c
    lp = c["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == 5
    for tok, val, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert 1 <= len(top) <= 4
        assert next(iter(top)) == tok and top[tok] == val  # sampled token first
        assert isinstance(val, float) and val <= 0
        assert val == max(top.values())  # greedy: the sampled token is rank 1
    assert lp["text_offset"][0] == 0
    assert c["text"] == "".join(lp["tokens"]) or "<0x" in "".join(lp["tokens"])


def test_response_echo_prompt_logprobs_and_token_ids() -> None:
    _, r = _complete({"prompt": "Hello", "max_tokens": 3, "temperature": 0, "logprobs": 2, "echo": True,
                        "prompt_logprobs": 2, "return_token_ids": True})
    (c,) = r["choices"]
    assert c["text"].startswith("Hello")
    lp = c["logprobs"]
    assert lp["tokens"][:5] == list("Hello") and len(lp["tokens"]) == 8
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["top_logprobs"][1]["e"] == lp["token_logprobs"][1]
    plp = c["prompt_logprobs"]
    assert plp[0] is None and len(plp) == 5
    first = plp[1]
    assert next(iter(first)) == str(ord("e"))
    assert first[str(ord("e"))]["decoded_token"] == "e"
    assert {v["rank"] for k, v in first.items() if k != str(ord("e"))} <= {1, 2}
    assert 2 <= len(first) <= 3
    assert c["token_ids"] == r["choices"][0]["token_ids"] and len(c["token_ids"]) == 3
    assert r["prompt_token_ids"] == c["prompt_token_ids"] == list(b"Hello")


def test_response_tokens_as_token_ids() -> None:
    _, r = _complete({"prompt": "Hey", "max_tokens": 2, "temperature": 0, "logprobs": 1,
                      "return_tokens_as_token_ids": True})
    lp = r["choices"][0]["logprobs"]
    assert all(t.startswith("token_id:") for t in lp["tokens"])
    assert all(k.startswith("token_id:") for top in lp["top_logprobs"] for k in top)


def test_echo_max_tokens_zero_scores_prompt_only() -> None:
    _, r = _complete({"prompt": "Hello", "max_tokens": 0, "temperature": 0, "logprobs": 1, "echo": True})
    c = r["choices"][0]
    assert c["text"] == "Hello" and r["usage"]["completion_tokens"] == 0
    assert len(c["logprobs"]["tokens"]) == 5
