"""Every repository path that README.md and docs/*.md name exists, and every link lands on a heading.

What counts as a path (so the rule catches a rename without flagging prose):
- in an inline code span or a fenced block, a word whose first folder is one of the repository's top-level
  folders (``scripts/bench/soak.py``, ``engines/speech/``, ``contracts/<capability>.py``);
- in an inline code span, a word with a file extension: a partial path must end some file of the repository
  (``services/text_limits.py``), a bare name must be the name of one (``bench_text.py``);
- a ``path:symbol`` or ``path.Symbol`` names a symbol of that file: the symbol must appear in it;
- ``<placeholder>`` and ``*`` are wildcards: at least one file must match;
- in a directory-tree block (lines that start with a top-level folder), the ``name/`` and ``name.ext`` words of an
  entry are paths inside that folder;
- a Markdown link to a file must reach it, and its ``#anchor`` must be one of that file's headings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP_LEVEL = (
    ".ci",
    "cluster",
    "configs",
    "contracts",
    "deployments",
    "docs",
    "engines",
    "khuluma",
    "persistence",
    "runtime",
    "scripts",
    "serve_app",
    "tests",
)
EXTENSIONS = ("py", "md", "sh", "yaml", "toml", "txt", "npz", "json", "jsonl", "tsv", "js", "css", "html", "ini")
SKIP_DIRS = {".git", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
SKIP_TOP = {".venv", "data", ".khuluma", "build", "dist"}  # ignored by git: local state, not the repository's

# Names that are deliberately not files of this repository: files of a model directory an operator brings, of an
# upstream project, or an example.
NOT_IN_REPOSITORY = {
    "tokens.txt",  # a CTC model directory's vocabulary (docs/speech.md)
    "config.json",  # a Hugging Face model directory
    "vocab.json",
    "preprocessor_config.json",
    "tokenizer_config.json",
    "relay_server.py",  # OpenAI's realtime relay example, which the Live API follows
    "MasakhaNER2.0/data/<lang>/{dev,test}.txt",  # the MasakhaNER 2.0 checkout scripts/eval_ner.py reads
    "faster_whisper/assets/silero_vad_v6.onnx",  # inside the faster-whisper wheel
    "tests/jfk.flac",  # openai/whisper's test recording
}

_PATH_WORD = re.compile(r"[\w.<>*{},/-]+(?:[:.][\w.]+)?")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _files() -> list[str]:
    found = []
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if path.is_file() and parts[0] not in SKIP_TOP and not SKIP_DIRS.intersection(parts):
            found.append("/".join(parts))
    return found


FILES = _files()
FOLDERS = {"/".join(f.split("/")[:i]) for f in FILES for i in range(1, f.count("/") + 1)}


def _exists(path: str) -> bool:
    path = path.rstrip("/")
    if "<" in path or "*" in path:
        pattern = re.escape(path).replace(r"\*", "[^/]*")
        pattern = re.sub(r"<[^>]*>", "[^/]+", pattern.replace(r"\<", "<").replace(r"\>", ">"))
        return any(re.fullmatch(pattern, p) for p in [*FILES, *FOLDERS])
    return path in FILES or path in FOLDERS


def _symbol_in(path: str, symbol: str) -> bool:
    file = ROOT / path
    text = (file / "__init__.py" if file.is_dir() else file).read_text()  # a package: what it exports
    return all(re.search(rf"\b{re.escape(part)}\b", text) for part in symbol.split("."))


def _check_repo_path(word: str) -> str | None:
    """None if ``word`` (whose first folder is a top-level one) names what exists, else why not."""
    path, _, symbol = word.partition(":")
    if _exists(path):
        return None if not symbol or _symbol_in(path, symbol) else f"{symbol} not in {path}"
    # contracts/text.TextClient: a module and a symbol of it
    module, dot, attr = path.partition(".")
    if dot and attr and not attr.endswith("/") and attr.split(".")[0] not in EXTENSIONS:
        for candidate in (f"{module}.py", module):
            if _exists(candidate):
                return None if _symbol_in(candidate, attr) else f"{attr} not in {candidate}"
    return "no such file or folder"


def _check_other_path(word: str) -> str | None:
    """A word with a file extension outside the top-level folders: the end of a path, or a file's name."""
    path = word.partition(":")[0]
    if "/" in path:
        ok = any(f.endswith("/" + path) for f in FILES) or _exists(path)
    elif "*" in path:
        ok = any(re.fullmatch(re.escape(path).replace(r"\*", ".*"), f.rsplit("/", 1)[-1]) for f in FILES)
    else:
        ok = any(f.rsplit("/", 1)[-1] == path for f in FILES)
    return None if ok else "no file of the repository has this name"


def _is_top_level(word: str) -> bool:
    return "/" in word and word.split("/")[0] in TOP_LEVEL


def _has_extension(word: str) -> bool:
    return re.search(rf"\.({'|'.join(EXTENSIONS)})(:[\w.]+)?$", word) is not None


def _words(text: str) -> Iterator[str]:
    for word in text.split():
        if "://" in word or "=" in word or word.startswith(("/", "~", "<", "$")) or re.fullmatch(r"\.\w+", word):
            continue
        match = _PATH_WORD.match(word.removeprefix("./"))
        if match:
            yield match.group(0).rstrip(".,;:")


def _blocks(text: str) -> tuple[list[tuple[int, str]], list[list[tuple[int, str]]]]:
    """The lines outside fenced blocks, and the fenced blocks' lines (numbered from 1)."""
    prose: list[tuple[int, str]] = []
    blocks: list[list[tuple[int, str]]] = []
    fenced: list[tuple[int, str]] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            if fenced is None:
                fenced = []
            else:
                blocks.append(fenced)
                fenced = None
        elif fenced is None:
            prose.append((number, line))
        else:
            fenced.append((number, line))
    return prose, blocks


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    prose, _ = _blocks(doc.read_text())
    seen: dict[str, int] = {}
    anchors = set()
    for _, line in prose:
        match = _HEADING.match(line)
        if match:
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _problems(doc: Path) -> list[str]:
    name = doc.relative_to(ROOT).as_posix()
    prose, blocks = _blocks(doc.read_text())
    problems = []

    def check(number: int, word: str, *, inline: bool) -> None:
        if word in NOT_IN_REPOSITORY:
            return
        if _is_top_level(word):
            why = _check_repo_path(word)
        elif inline and _has_extension(word):
            why = _check_other_path(word)
        else:
            return
        if why:
            problems.append(f"{name}:{number}: {word}: {why}")

    for number, line in prose:
        for span in _CODE_SPAN.findall(line):
            for word in _words(span):
                check(number, word, inline=True)
        for target in _LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (doc.parent / file).resolve() if file else doc
            if not linked.exists():
                problems.append(f"{name}:{number}: link {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                problems.append(f"{name}:{number}: link {target}: no such heading")
    for block in blocks:
        entry = None  # the top-level folder of a directory-tree line, and of its continuation lines
        for number, line in block:
            first = line.split(maxsplit=1)[0] if line.strip() else ""
            if first.endswith("/") and first.rstrip("/") in TOP_LEVEL and not line.startswith(" "):
                entry = first
            elif not line.startswith(" "):
                entry = None
            for word in _words(line):
                check(number, word, inline=False)
                child = re.fullmatch(rf"[\w-]+(/|\.({'|'.join(EXTENSIONS)}))", word)
                if entry and word != first and child:
                    check(number, entry + word, inline=False)
    return problems


def test_the_rule_sees_the_paths_the_docs_name() -> None:
    """The checks look at real paths (a rule that matched nothing would pass forever)."""
    named = [w for d in DOCS for _, line in _blocks(d.read_text())[0] for s in _CODE_SPAN.findall(line)
             for w in _words(s) if _is_top_level(w)]  # fmt: skip
    assert len(named) > 200
    assert all(_exists(folder) for folder in TOP_LEVEL)
    assert _check_repo_path("contracts/errors.py:HTTP_STATUS") is None
    assert _check_repo_path("contracts/errors.py:NO_SUCH_SYMBOL") is not None
    assert _check_repo_path("engines/no_such_module.py") is not None
    assert _check_repo_path("contracts/<capability>.py") is None
    assert _check_repo_path("engines/text/ner.ner_only") is not None  # a package names what it exports only
    assert "text-routes-through-ray-serve" in _anchors(ROOT / "docs" / "performance.md")
    assert _check_other_path("text_limits.py") is None
    assert _check_other_path("no_such_bench.py") is not None


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    problems = _problems(doc)
    assert not problems, "\n".join(problems)
