"""Every repository path that README.md and docs/*.md name exists, and every link lands on a heading.

What counts as a path (so the rule catches a rename without flagging prose):
- in an inline code span or a fenced block, a word whose first folder is one of the repository's top-level
  folders (``scripts/bench/soak.py``, ``engines/speech/``, ``contracts/<capability>.py``);
- in an inline code span, a word with a file extension: a partial path must end some file of the repository
  (``services/text_limits.py``), a bare name must be the name of one (``bench_text.py``);
- a ``path:symbol`` or ``path.Symbol`` names a symbol of that file: the symbol must appear in it;
- in an inline code span, a ``Class.member`` (``SpeechClient.transcribe``, ``Settings.for_replica(...)``) names a
  class of the repository and a method or attribute it defines or inherits (from a class of the repository), and a
  dotted ``package.module.symbol`` (``contracts.errors.HTTP_STATUS``) a module and a symbol of it;
- ``<placeholder>`` and ``*`` are wildcards: at least one file must match;
- in a directory-tree block (lines that start with a top-level folder), the ``name/`` and ``name.ext`` words of an
  entry are paths inside that folder;
- a Markdown link to a file must reach it, and its ``#anchor`` must be one of that file's headings.
"""

from __future__ import annotations

import ast
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
    "khuluma.settings",  # the settings' logger name, not a module
}
# Class.member names of the speech engine or the live sessions that are being renamed (issue #45's speech work)
# and that a doc may name before or after the rename lands: "Class.member" -> why. Empty: every name resolves.
RENAMING: dict[str, str] = {}

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


_MEMBER = re.compile(r"(?<![\w./:<-])([A-Z][A-Za-z0-9_]*)\.([A-Za-z_]\w*)")
_PACKAGES = tuple(folder for folder in TOP_LEVEL if (ROOT / folder / "__init__.py").is_file())
_DOTTED = re.compile(rf"(?<![\w./:<-])((?:{'|'.join(_PACKAGES)})(?:\.\w+)+)")


def _defined(statements: list[ast.stmt]) -> set[str]:
    """The names a module's or a class's body defines, assigns or imports."""
    names = set()
    for node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def _classes() -> dict[str, list[tuple[set[str], list[str]]]]:
    """Every class of the repository's Python files: its name -> (the names its body defines, its bases' names)."""
    found: dict[str, list[tuple[set[str], list[str]]]] = {}
    for file in FILES:
        if not file.endswith(".py"):
            continue
        for node in ast.walk(ast.parse((ROOT / file).read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef):
                continue
            members = _defined(node.body)
            bases = [base.id if isinstance(base, ast.Name) else getattr(base, "attr", "") for base in node.bases]
            found.setdefault(node.name, []).append((members, bases))
    return found


CLASSES = _classes()


def _defines(cls: str, member: str, seen: frozenset[str] = frozenset()) -> bool:
    for members, bases in CLASSES.get(cls, []):
        if member in members or any(b not in seen and _defines(b, member, seen | {cls}) for b in bases):
            return True
    return False


def _check_member(cls: str, member: str) -> str | None:
    """None if ``cls`` is a class of the repository that defines or inherits ``member``, else why not."""
    if f"{cls}.{member}" in RENAMING:
        return None
    if cls not in CLASSES:
        return "no class of the repository has this name"
    return None if _defines(cls, member) else f"{cls} has no {member}"


def _module_names(module: Path) -> set[str]:
    """What a module defines or imports at its top level."""
    return _defined(ast.parse(module.read_text(encoding="utf-8")).body)


def _check_dotted(name: str) -> str | None:
    """None if ``package.module[.symbol[.member]]`` names a module of the repository, a symbol it defines or
    imports, and a member of that symbol where it is a class."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            rest = parts[i:]
            if not rest:
                return None
            if rest[0] not in _module_names(module):
                return f"{rest[0]} not in {module.relative_to(ROOT).as_posix()}"
            return _check_member(rest[0], rest[1]) if len(rest) > 1 and rest[0] in CLASSES else None
    return "no such module"


def _check_names(span: str) -> Iterator[tuple[str, str]]:
    """The ``Class.member`` and dotted module names of an inline code span that do not resolve, with why."""
    for match in _MEMBER.finditer(span):
        cls, member = match.groups()
        if member in EXTENSIONS:  # a file name (README.md): the path rules' business
            continue
        why = _check_member(cls, member)
        if why:
            yield f"{cls}.{member}", why
    for match in _DOTTED.finditer(span):
        name = match.group(1).rstrip(".")
        why = None if name in NOT_IN_REPOSITORY else _check_dotted(name)
        if why:
            yield name, why


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
            problems.extend(f"{name}:{number}: {symbol}: {why}" for symbol, why in _check_names(span))
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
    assert _check_member("Settings", "for_replica") is None
    assert _check_member("TextClient", "ping") is None  # inherited from DeploymentClient
    assert _check_member("SpeechClient", "no_such_method") is not None
    assert _check_member("NoSuchClass", "method") is not None
    assert _check_dotted("contracts.errors.HTTP_STATUS") is None
    assert _check_dotted("contracts.errors.NO_SUCH_SYMBOL") is not None
    assert _check_dotted("engines.no_such_module.thing") is not None
    assert _check_dotted("engines.search.documents.extract_text_isolated") is not None  # named there, not defined
    assert _check_dotted("deployments.speech.Speech.transcribe") is None
    assert list(_check_names("`SpeechClient.stream_step` then `Settings.from_bound`")) == [
        ("SpeechClient.stream_step", "SpeechClient has no stream_step")
    ]
    named = [n for d in DOCS for _, line in _blocks(d.read_text())[0] for s in _CODE_SPAN.findall(line)
             for n in _MEMBER.findall(s)]  # fmt: skip
    assert len(named) > 30  # the docs do name classes' members


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.relative_to(ROOT).as_posix())
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    problems = _problems(doc)
    assert not problems, "\n".join(problems)
