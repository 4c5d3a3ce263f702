"""Pages that pull other files in: reStructuredText `.. include::` and MyST `{include}`.

Sphinx sites keep generated API text and shared snippets in files of their own and include them
(`.. include:: generated/fence.rst`): the page a reader opens is the including page, with the
included text in place, under the section where the include sits. So an include inside the ingested
tree is followed and its text becomes part of the including page; the included file is then not a
document of its own (see `included_files`), or every sentence of it would be found twice, once at a
URL nobody publishes.

An include is read only when it lies inside the tree that was named (the folder, or a named file's
own folder): `.. include:: ../LICENSE` from `docs/license.rst` is outside `docs/`, and a job must not
read files it was not given. Such an include, a missing one and a cycle (a.rst includes b.rst
includes a.rst) are each named in a note of the including page and not read. A path starting with
"/" is relative to the tree's top, as Sphinx reads it; `<isonum.txt>` names a docutils-internal file
and is left alone.

RST includes are expanded as text before docutils reads the page, which is what docutils itself does
(the included lines join the page's line stream), so its headings take their levels from the page's
adornment styles. MyST includes are parsed where they sit, with their headings moved under the
section that holds the include unless `:heading-offset:` says otherwise.
"""

from __future__ import annotations

import hashlib
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from knowledge.errors import IngestError

MAX_DEPTH = 8  # an include of an include ... this deep is a generated loop, not documentation
MAX_INCLUDED_BYTES = 16 * 1024 * 1024  # per page: one include repeated many times is still bounded

RST_INCLUDE = re.compile(r"^([ \t]*)\.\.[ \t]+include::[ \t]*(\S.*?)\s*$")
MYST_INCLUDE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*\{include\}\s*(\S.*?)\s*$")
_RST_OPTION = re.compile(r"^([ \t]+):([\w-]+):(?:[ \t]+(.*?))?\s*$")


class Included:
    """One file an include reached: where it is, its text, and its path to name it by."""

    def __init__(self, path: Path, text: str, shown: str) -> None:
        self.path, self.text, self.shown = path, text, shown


class IncludeResolver:
    """Reads the includes of one page inside one tree; collects the page's notes and what it read.

    `read` is the ingest job's own reader (it refuses FIFOs, huge files and unreadable ones by
    raising IngestError), so an include is read under the same rules as a file named on the command
    line."""

    def __init__(self, root: Path, read: Callable[[Path], bytes], page: Optional[Path] = None) -> None:
        self.root = os.path.abspath(root)
        self._real_root = os.path.realpath(root)
        self._read = read
        # Real paths being expanded, the page itself first; shown paths alongside, for a cycle's note.
        self._stack: list[str] = [os.path.realpath(page)] if page is not None else []
        self._shown: list[str] = [self.shown(os.path.abspath(page))] if page is not None else []
        self._bytes = 0
        self.notes: list[str] = []
        self.read_files: list[tuple[str, str]] = []  # (path inside the tree, sha256 of its bytes)

    def target_path(self, including: Path, target: str) -> Optional[str]:
        """The normalised absolute path an include names, or None for a docutils-internal one."""
        target = target.strip()
        if target.startswith("<") and target.endswith(">"):
            return None
        if target.startswith("/"):
            return os.path.normpath(os.path.join(self.root, target.lstrip("/")))
        return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(including)), target))

    def inside(self, path: str) -> bool:
        return _under(path, self.root) or _under(os.path.realpath(path), self._real_root)

    def shown(self, path: str) -> str:
        return os.path.relpath(path, self.root) if _under(path, self.root) else path

    @contextmanager
    def enter(self, including: Path, target: str) -> Iterator[Optional[Included]]:
        """The included file while its own includes are expanded (so a cycle is seen), or None with
        a note saying why it was not read."""
        found = self._open(including, target)
        if found is None:
            yield None
            return
        self._stack.append(os.path.realpath(found.path))
        self._shown.append(found.shown)
        try:
            yield found
        finally:
            self._stack.pop()
            self._shown.pop()

    def _open(self, including: Path, target: str) -> Optional[Included]:
        path = self.target_path(including, target)
        if path is None:
            return None
        if not self.inside(path):
            self.notes.append(f"include {target} is outside the ingested tree ({path}): not read")
            return None
        shown = self.shown(path)
        real = os.path.realpath(path)
        if real in self._stack:
            chain = " -> ".join(self._shown + [shown])
            self.notes.append(f"include {target} is a cycle ({chain}): not followed")
            return None
        if len(self._stack) > MAX_DEPTH:
            self.notes.append(f"include {target} is nested {MAX_DEPTH} deep: not followed")
            return None
        if not os.path.lexists(path):
            self.notes.append(f"include {target}: no such file ({shown}): not read")
            return None
        try:
            data = self._read(Path(path))
        except IngestError as exc:
            self.notes.append(f"include {target}: {exc}: not read")
            return None
        if self._bytes + len(data) > MAX_INCLUDED_BYTES:
            self.notes.append(f"include {target}: the page's includes pass {MAX_INCLUDED_BYTES} bytes: not read")
            return None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            self.notes.append(f"include {target}: not UTF-8 text: not read")
            return None
        if "\x00" in text[:8192]:
            self.notes.append(f"include {target}: binary file: not read")
            return None
        self._bytes += len(data)
        self.read_files.append((shown, hashlib.sha256(data).hexdigest()))
        return Included(Path(path), text.replace("\r\n", "\n").replace("\r", "\n"), shown)


def _under(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives
        return False


def select_lines(text: str, options: dict[str, str]) -> str:
    """The part of an included text its options ask for (docutils' and MyST's option names)."""
    lines = text.split("\n")
    start, end = options.get("start-line"), options.get("end-line")
    if start or end:
        try:
            lines = lines[int(start) if start else None : int(end) if end else None]
        except ValueError:
            pass
    text = "\n".join(lines)
    after, before = options.get("start-after"), options.get("end-before")
    if after and after in text:
        text = text.split(after, 1)[1]
    if before and before in text:
        text = text.split(before, 1)[0]
    return text


def literal_language(options: dict[str, str]) -> Optional[str]:
    """The language of an include shown as code (`:literal:`, `:code: cpp`), or None for text."""
    if "code" in options:
        return options["code"] or ""
    if "literal" in options:
        return ""
    return None


def expand_rst(text: str, path: Path, resolver: IncludeResolver) -> str:
    """The page with each `.. include::` inside the tree replaced by the included lines, at the
    directive's indentation; includes not followed stay, and docutils drops them."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = RST_INCLUDE.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent, target = match.group(1), match.group(2)
        j = i + 1
        options: dict[str, str] = {}
        while j < len(lines):
            option = _RST_OPTION.match(lines[j])
            if not option or len(option.group(1).expandtabs()) <= len(indent.expandtabs()):
                break
            options[option.group(2)] = option.group(3) or ""
            j += 1
        with resolver.enter(path, target) as included:
            if included is None:
                out.extend(lines[i:j])
            else:
                body = select_lines(included.text, options)
                language = literal_language(options)
                if language is not None:
                    body = f".. code-block:: {language}\n\n" + "\n".join(f"   {line}" for line in body.split("\n"))
                else:
                    body = expand_rst(body, included.path, resolver)
                out.append("")
                out.extend(f"{indent}{line}" if line.strip() else "" for line in body.split("\n"))
                out.append("")
        i = j
    return "\n".join(out)


def myst_options(lines: Sequence[str]) -> dict[str, str]:
    """`:key: value` lines at the top of a MyST directive's body."""
    options: dict[str, str] = {}
    for line in lines:
        match = re.match(r"^\s*:([\w-]+):(?:\s+(.*?))?\s*$", line)
        if not match:
            break
        options[match.group(1)] = match.group(2) or ""
    return options


def include_targets(path: Path, text: str) -> list[str]:
    """What a page's include directives name, as written (RST and MyST), for `included_files`."""
    rst = path.suffix.lower() in (".rst", ".rest")
    pattern = RST_INCLUDE if rst else MYST_INCLUDE
    return [m.group(2) for m in (pattern.match(line) for line in text.split("\n")) if m]


def included_files(pages: Sequence[tuple[Path, Path]], read: Callable[[Path], bytes]) -> dict[str, str]:
    """{real path of an included file: the page that includes it} among the pages of one job, each
    given as (page, its tree's root).

    Only files reached from a page nobody includes count: in a pure cycle (a.rst and b.rst include
    each other, nothing includes either) both stay documents of their own, or nothing of them would
    be indexed at all."""
    edges: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    for page, root in pages:
        if page.suffix.lower() not in (".rst", ".rest", ".md", ".markdown", ".myst"):
            continue
        try:
            text = read(page).decode("utf-8-sig", errors="replace")
        except IngestError:
            continue
        targets = include_targets(page, text)
        if not targets:
            continue
        resolver = IncludeResolver(root, read)
        real = os.path.realpath(page)
        names[real] = str(page)
        for target in targets:
            found = resolver.target_path(page, target)
            if found and resolver.inside(found) and os.path.isfile(found):
                edges.setdefault(real, []).append(os.path.realpath(found))
    included = {t for targets in edges.values() for t in targets}
    owner: dict[str, str] = {}
    todo = [(p, p) for p in edges if p not in included]
    while todo:
        page, top = todo.pop()
        for target in edges.get(page, []):
            if target not in owner and target != top:
                owner[target] = names.get(page, page)
                todo.append((target, top))
    return owner
