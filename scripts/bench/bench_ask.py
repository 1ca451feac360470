"""The language model on CPU: time to first token and tokens/s, through the service and bare, side by side in one run.

For each shape, a model of the real shape of Qwen2.5-0.5B-Instruct and Qwen2.5-1.5B-Instruct (their published
configurations; random weights, so the same cost per token as the real model; converted to CTranslate2 int8 the way
`khuluma models add` converts) generates ``--new-tokens`` tokens greedily after a prompt of about
``--prompt-tokens`` tokens (random words under the model's ChatML template), one stream and four at once:

- bare: ``ctranslate2.Generator.generate_batch`` with a per-token callback on the same prompt tokens (the four
  streams as one batch of four), with as many threads as the service's generator, in this process;
- service: ``POST /v1/chat/completions`` with ``stream: true`` (one client, then four at once): the ingress (token
  check, model check, usage metering) on plain uvicorn over the LLM deployment under Serve's local testing mode,
  whose batch scheduler groups the four into one batch; tokens reach the client as server-sent events.

Time to first token (TTFT) runs from sending the request (bare: calling the generator) to the first token;
"tokens/s per stream" is (tokens - 1) / (last - first token), the decode rate a reader sees; "aggregate" is every
stream's tokens over the wall time of the round. Each figure is the median of ``--rounds`` rounds; bare and service
rounds alternate (both models are loaded, each idle while the other runs).

    flock /work/notes/bench.lock .venv/bin/python scripts/bench/bench_ask.py [--shapes 0.5b,1.5b] [--rounds 3]
        [--prompt-tokens 256] [--new-tokens 64] [--cache DIR]

The models are built once into ``--cache`` (0.5B: 1 GB of bfloat16 while building, 0.6 GB int8 kept; 1.5B: 3 GB
and 1.7 GB).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from _load import table  # noqa: E402
from _plain import plain_server  # noqa: E402


def model(cache: Path, shape: str) -> Path:
    """The int8 CTranslate2 model of ``shape``, built into ``cache`` once."""
    from _tiny_llm import build_shaped, convert

    ct2 = cache / f"qwen2.5-{shape}-shaped-int8"
    if (ct2 / "model.bin").is_file():
        return ct2
    hf = cache / f"qwen2.5-{shape}-shaped-hf"
    print(f"building a random {shape} model of the real shape in {hf} ...", flush=True)
    build_shaped(hf, shape)
    convert(hf, ct2, "int8")
    shutil.rmtree(hf)
    return ct2


def prompts(count: int, words: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """``count`` different conversations of the same token length (random words of the shaped vocabulary)."""
    rng = random.Random(seed)
    return [
        [{"role": "user", "content": " ".join(f"w{rng.randrange(100, 150000)}" for _ in range(words))}]
        for _ in range(count)
    ]


class Bare:
    """The CTranslate2 generator alone, on the prompt tokens the service's template makes."""

    def __init__(self, model_dir: Path, threads: int) -> None:
        import ctranslate2

        from engines.llm.tokenizer import ChatTokenizer

        self.tokenizer = ChatTokenizer(model_dir, 32768)
        self.generator = ctranslate2.Generator(str(model_dir), compute_type="int8", intra_threads=threads)

    def close(self) -> None:
        del self.generator

    def round(self, conversations: list[list[dict[str, str]]], new_tokens: int) -> list[dict[str, float]]:
        from contracts.llm import ChatMessage

        batch = [
            self.tokenizer.tokens(self.tokenizer.encode([ChatMessage(**m) for m in conv])) for conv in conversations
        ]
        times: list[list[float]] = [[] for _ in batch]

        def step(result) -> bool:
            times[result.batch_id].append(time.perf_counter())
            return False

        start = time.perf_counter()
        self.generator.generate_batch(
            batch,
            max_length=new_tokens,
            include_prompt_in_result=False,
            end_token=self.tokenizer.end_tokens,
            sampling_topk=1,
            callback=step,
        )
        end = time.perf_counter()
        return [_stream(start, t, end) for t in times] + [{"prompt_tokens": len(batch[0])}]


def _stream(start: float, stamps: list[float], end: float) -> dict[str, float]:
    n = len(stamps)
    rate = (n - 1) / (stamps[-1] - stamps[0]) if n > 1 and stamps[-1] > stamps[0] else 0.0
    return {"ttft": stamps[0] - start if stamps else float("nan"), "tokens": n, "rate": rate, "wall": end - start}


def service_stream(
    client: httpx.Client, url: str, token: str, model_id: str, conversation: list, new_tokens: int
) -> dict[str, float]:
    body = {
        "model": model_id,
        "messages": conversation,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "max_tokens": new_tokens,
    }
    stamps: list[float] = []
    tokens = 0
    start = time.perf_counter()
    with client.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=600
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                stamps.append(time.perf_counter())
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    # a delta may carry several tokens (text that piled up goes as one): the rate counts the model's tokens
    result = _stream(start, stamps, end)
    if len(stamps) > 1 and stamps[-1] > stamps[0]:
        result["rate"] = (tokens - 1) / (stamps[-1] - stamps[0])
    result["tokens"] = tokens
    return result


def service_round(
    client: httpx.Client, url: str, token: str, model_id: str, conversations: list, new_tokens: int
) -> list[dict]:
    """The conversations at once, one thread each, over one client made beforehand (a new httpx client per
    request builds an SSL context: tenths of a second on a loaded machine, and the requests would reach the
    service too far apart to share a batch)."""
    with ThreadPoolExecutor(len(conversations)) as pool:
        futures = [pool.submit(service_stream, client, url, token, model_id, c, new_tokens) for c in conversations]
        return [f.result() for f in futures]


def summarise(rounds: list[list[dict]], new_tokens: int) -> dict[str, float]:
    """Medians over rounds: the slowest stream's TTFT, the mean per-stream rate, aggregate tokens/s."""
    ttft = statistics.median(max(s["ttft"] for s in r) for r in rounds)
    rate = statistics.median(statistics.mean(s["rate"] for s in r) for r in rounds)
    aggregate = statistics.median(len(r) * new_tokens / max(s["wall"] for s in r) for r in rounds)
    return {"ttft": ttft, "rate": rate, "aggregate": aggregate}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="0.5b,1.5b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=256, help="About this many prompt tokens (words + template).")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--streams", default="1,4")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "khuluma-bench" / "llm")
    ap.add_argument("--json", type=Path, help="Also write the figures as JSON (scripts/bench/run_all.py reads them).")
    args = ap.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    threads = os.cpu_count() or 1
    streams = [int(s) for s in args.streams.split(",")]

    from contracts.settings import Settings
    from persistence.session import Database
    from serve_app.tokens import create_token

    rows = []
    notes = []
    figures: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for shape in args.shapes.split(","):
        model_dir = model(args.cache, shape)
        data = tempfile.mkdtemp(prefix="khuluma-bench-ask-")
        token = create_token(Database.migrated(Settings(data_dir=data).db_url), "bench")[0]
        words = max(1, args.prompt_tokens - 20)  # one token per word, ~20 of template around them
        conversations = prompts(max(streams), words)
        results: dict[tuple[str, int], dict[str, float]] = {}
        settings = {"data_dir": data, "llm": {"model": str(model_dir), "max_answer_tokens": args.new_tokens}}
        with plain_server(settings, ["llm"]) as url, httpx.Client(limits=httpx.Limits(max_connections=8)) as client:
            bare = Bare(model_dir, threads)
            bare.round(conversations[:1], 4)  # warm-up
            service_round(client, url, token, model_dir.name, conversations[: max(streams)], 4)
            for n in streams:
                # bare and service round by round, so that the load of a shared machine weighs on both alike
                bare_rounds, service_rounds = [], []
                for _ in range(args.rounds):
                    bare_rounds.append(bare.round(conversations[:n], args.new_tokens))
                    service_rounds.append(
                        service_round(client, url, token, model_dir.name, conversations[:n], args.new_tokens)
                    )
                prompt_tokens = int(bare_rounds[0][-1]["prompt_tokens"])
                results["bare", n] = summarise([m[:-1] for m in bare_rounds], args.new_tokens)
                results["service", n] = summarise(service_rounds, args.new_tokens)
            bare.close()
        shutil.rmtree(data, ignore_errors=True)
        figures[shape] = {str(n): {side: results[side, n] for side in ("bare", "service")} for n in streams}
        for n in streams:
            b, s = results["bare", n], results["service", n]
            for side, r in (("bare ctranslate2", b), ("service (HTTP, SSE)", s)):
                rows.append(
                    (
                        f"{shape} int8, {n} stream{'s' if n > 1 else ''}, {side}",
                        {
                            "TTFT s": f"{r['ttft']:.2f}",
                            "tok/s per stream": f"{r['rate']:.1f}",
                            "tok/s aggregate": f"{r['aggregate']:.1f}",
                        },
                    )
                )
            rows.append(
                (
                    f"{shape} int8, {n} stream{'s' if n > 1 else ''}, service/bare",
                    {
                        "TTFT s": f"{s['ttft'] / b['ttft']:.2f}x",
                        "tok/s per stream": f"{s['rate'] / b['rate']:.2f}x" if b["rate"] else "",
                        "tok/s aggregate": f"{s['aggregate'] / b['aggregate']:.2f}x",
                    },
                )
            )
        notes.append(f"{shape}: {prompt_tokens} prompt tokens")
    print(
        f"\nQwen2.5-Instruct shapes, random weights, CTranslate2 int8, {threads} threads; greedy, {args.new_tokens} "
        f"new tokens; {'; '.join(notes)}; median of {args.rounds} rounds; TTFT of the slowest stream; "
        f"cores={os.cpu_count()}"
    )
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"new_tokens": args.new_tokens, "threads": threads, "shapes": figures}))


if __name__ == "__main__":
    main()
