"""The language model on a GPU (scripts/bench/gpu_check.sh, step `llm`): what can run there runs, the rest says why not.

1. CTranslate2's generator on CUDA (int8_float16) behind the service's batch scheduler (``engines/llm/ct2.py``): one
   stream and four on a model directory (``--ct2``), time to first token and tokens/s, against the generator alone.
2. vLLM through Ray Serve LLM, when vLLM and Ray are installed: the ``LLMServer`` deployment the app builder makes
   for ``llm.engine: vllm`` (``deployments/llm_vllm.py``), on a Hugging Face directory (``--hf``), and one streamed
   completion of a prompt the LLM replica assembled, read back the way the LLM replica reads it.

    python3 scripts/bench/llm_gpu_check.py --ct2 DIR --hf DIR [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def ct2_on_cuda(model_dir: Path, new_tokens: int, device: str = "cuda") -> dict[str, Any]:
    import ctranslate2

    from contracts.llm import ChatMessage
    from engines.llm.ct2 import CT2Generator, Job, SamplingKey
    from engines.llm.tokenizer import ChatTokenizer

    if device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        return {"skipped": "no CUDA device visible to CTranslate2"}
    tokenizer = ChatTokenizer(model_dir, 4096)
    compute = "int8_float16" if device == "cuda" else "int8"
    generator = CT2Generator(model_dir, tokenizer, device=device, compute_type=compute, batch_wait_s=0.02)
    out: dict[str, Any] = {"compute_type": generator.compute_type}
    try:
        for streams in (1, 4):
            ended = [threading.Event() for _ in range(streams)]
            stamps: list[list[float]] = [[] for _ in range(streams)]
            start = time.perf_counter()
            for i in range(streams):
                prompt = tokenizer.encode([ChatMessage(role="user", content=f"Question {i}: when is the clinic open?")])
                generator.submit(
                    Job(
                        prompt=tokenizer.tokens(prompt),
                        max_tokens=new_tokens,
                        sampling=SamplingKey(),
                        stops=(),
                        on_text=lambda _, mine=stamps[i]: mine.append(time.perf_counter()),
                        on_end=lambda *_, done=ended[i]: done.set(),
                    )
                )
            for event in ended:
                event.wait(300)
            wall = time.perf_counter() - start
            out[f"{streams}_streams"] = {
                "ttft_s": round(max(s[0] for s in stamps if s) - start, 4),
                "batches": generator.batches,
                "aggregate_tokens_per_s": round(streams * new_tokens / wall, 1),
            }
    finally:
        generator.close()
    return out


def vllm_through_ray_serve(hf_dir: Path, new_tokens: int) -> dict[str, Any]:
    try:
        import ray
        import vllm  # noqa: F401
        from ray import serve
    except ImportError as exc:
        return {"skipped": f"vLLM or Ray is not installed here ({exc}); install the `vllm` extra on a GPU node"}
    from contracts.llm import ChatMessage, GenerationRequest, Sampling
    from contracts.settings import Settings
    from deployments.llm_vllm import build_server, stream_completion
    from engines.llm.prompt import assemble
    from engines.llm.tokenizer import ChatTokenizer

    settings = Settings(_env_file=None, llm={"engine": "vllm", "model": str(hf_dir), "context_tokens": 512})
    ray.init(address="local", include_dashboard=False)
    try:
        handle = serve.run(build_server(settings), name="llm-check", route_prefix=None)
        tokenizer = ChatTokenizer(hf_dir, 512)
        request = GenerationRequest(
            messages=[ChatMessage(role="user", content="When is the clinic open?")],
            sampling=Sampling(max_tokens=new_tokens),
        )
        assembled = assemble(tokenizer, request, new_tokens)

        async def stream() -> dict[str, Any]:
            start, first, text, end = time.perf_counter(), None, "", None
            async for event in stream_completion(handle, hf_dir.name, assembled, request.sampling):
                if getattr(event, "text", None):
                    first = first or time.perf_counter()
                    text += event.text
                elif event.type == "end":
                    end = event
            return {
                "ttft_s": round((first or time.perf_counter()) - start, 4),
                "characters": len(text),
                "finish_reason": getattr(end, "finish_reason", None),
                "completion_tokens": getattr(end, "completion_tokens", None),
            }

        return asyncio.run(stream())
    finally:
        serve.shutdown()
        ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ct2", type=Path, required=True)
    ap.add_argument("--hf", type=Path, required=True)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--device", default="cuda", help="cpu: try the CTranslate2 half where there is no GPU.")
    args = ap.parse_args()
    report: dict[str, Any] = {}
    checks = (
        ("ctranslate2_" + args.device, lambda: ct2_on_cuda(args.ct2, args.new_tokens, args.device)),
        ("vllm", lambda: vllm_through_ray_serve(args.hf, args.new_tokens)),
    )
    for name, check in checks:
        try:
            report[name] = check()
        except Exception as exc:  # noqa: BLE001 - a check reports its failure and the next one runs
            report[name] = {"failed": f"{type(exc).__name__}: {exc}"}
        print(name, json.dumps(report[name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
