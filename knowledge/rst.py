"""reStructuredText through docutils: sections, titles, tables, code and lists, without markup left over.

Documentation trees written for Sphinx use directives and roles docutils alone does not know
(`toctree`, `tab-set`, `doxygenfunction`, `:ref:`, `:cpp:func:`). Unknown to docutils, each would turn
into an error message with the raw directive text kept in the document, which is how "directives left in
the text" happened. So before parsing, every directive and role name the source uses is looked up;
an unknown directive is registered as a container whose content is parsed as ordinary body text (a
`tab-item`'s paragraphs stay, its syntax goes), or dropped when it only wires pages together
(`toctree`, `index`, `doxygen*`); an unknown role renders its visible text (`:ref:`LDS <lds>`` -> LDS).
docutils reads no other file (`literalinclude`, `csv-table :file:`) and no raw HTML: an ingest job
expands `include` itself, inside the tree it was given, before docutils sees the page
(knowledge/includes.py), and an include it did not follow is dropped here. The names of dropped
directives are returned, so a page that held nothing else can say what it held ("toctree only").

The result is the same `Block` list every format produces: headings with their docutils ids (the
anchors Sphinx gives the rendered page), paragraphs, code blocks and tables with their header row.
"""

from __future__ import annotations

import io
import re
import threading
from typing import Optional

from knowledge.blocks import Block, markdown_table

_DIRECTIVE = re.compile(r"^[ \t]*\.\.[ \t]+([A-Za-z][\w:.+-]*)::", re.MULTILINE)
_ROLE = re.compile(r":([A-Za-z][\w.+-]*(?::[A-Za-z][\w.+-]*)*):`")
_TITLE_TARGET = re.compile(r"^(.*?)\s*<([^<>]+)>$", re.DOTALL)

# Directives that only connect pages or pull in generated API text: nothing of theirs is prose.
_DROPPED = (
    "toctree",
    "contents",
    "index",
    "highlight",
    "literalinclude",
    "include",
    "sectionauthor",
    "moduleauthor",
    "codeauthor",
    "currentmodule",
    "module",
    "autosummary",
    "graphviz",
    "mermaid",
    "raw",
    "image",
    "youtube",
    "bibliography",
    "only-if-dummy",
)
_DROPPED_PREFIXES = ("doxygen", "auto")
_CODE_ALIASES = ("code-block", "code", "sourcecode", "code-cell", "prompt")
_ADMONITIONS = {
    "note": "Note",
    "warning": "Warning",
    "tip": "Tip",
    "important": "Important",
    "caution": "Caution",
    "attention": "Attention",
    "danger": "Danger",
    "error": "Error",
    "hint": "Hint",
    "seealso": "See also",
    "versionadded": "New in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated",
}

_lock = threading.Lock()  # docutils keeps its directive and role registries in module globals
_registered: set[str] = set()
_dropped_seen: list[str] = []  # names of the directives dropped while parsing one page (under _lock)


def _setup(source: str) -> None:
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives, roles

    class _AnyOption(dict):
        """Accepts every option name (Sphinx directives have many); the values are not used."""

        def __init__(self) -> None:
            super().__init__(_any=directives.unchanged)

        def __contains__(self, key: object) -> bool:
            return True

        def __getitem__(self, key):
            return directives.unchanged

        def get(self, key, default=None):
            return directives.unchanged

    class _Container(Directive):
        has_content = True
        optional_arguments = 1
        final_argument_whitespace = True
        option_spec = _AnyOption()

        def run(self):
            node = nodes.container()
            label = _ADMONITIONS.get(self.name)
            head = " ".join(self.arguments).strip()
            if label:
                # ".. versionadded:: 6.2\n   The knob ..." arrives as one argument: version, then text.
                first, _, rest = " ".join(head.split()).partition(" ")
                text = (
                    f"{label} {first}: {rest}"
                    if label.endswith("version") and rest
                    else (f"{label} {head}:" if head else f"{label}:")
                )
            else:
                text = head
            if text:
                inline, _messages = self.state.inline_text(text, self.lineno)
                node += nodes.paragraph("", "", *inline)
            if self.content:
                self.state.nested_parse(self.content, self.content_offset, node)
            return [node]

    class _Code(Directive):
        """Sphinx's code-block (options such as :linenos: and :caption: that docutils' own `code`
        refuses, which would drop the block): the content, verbatim, tagged with its language."""

        has_content = True
        optional_arguments = 1
        option_spec = _AnyOption()

        def run(self):
            code = "\n".join(self.content)
            node = nodes.literal_block(code, code)
            node["classes"] += ["code"] + [a for a in self.arguments[:1] if a]
            return [node]

    class _Dropped(Directive):
        has_content = True
        optional_arguments = 1
        final_argument_whitespace = True
        option_spec = _AnyOption()

        def run(self):
            _dropped_seen.append(self.name)
            return []

    def _visible_text(name, rawtext, text, lineno, inliner, options=None, content=None):
        match = _TITLE_TARGET.match(text)
        shown = match.group(1) if match and match.group(1) else text
        return [nodes.literal(rawtext, shown.lstrip("~!"))], []

    for name in set(_DIRECTIVE.findall(source)):
        key = f"directive:{name}"
        if key in _registered:
            continue
        if name in _CODE_ALIASES:
            directives.register_directive(name, _Code)
        elif name in _DROPPED or name.startswith(_DROPPED_PREFIXES):
            directives.register_directive(name, _Dropped)
        elif name in directives._directive_registry or name in directives._directives:
            pass  # docutils' own (note, list-table, code, csv-table, ...)
        else:
            directives.register_directive(name, _Container)
        _registered.add(key)
    for name in set(_ROLE.findall(source)):
        key = f"role:{name}"
        if key in _registered:
            continue
        if name not in roles._role_registry and name not in roles._roles:
            roles.register_local_role(name, _visible_text)
        _registered.add(key)


def parse_rst(text: str) -> tuple[Optional[str], list[Block], list[str]]:
    """(document title, blocks, names of the directives dropped). Never raises for markup problems:
    docutils reports nothing here."""
    from docutils.core import publish_doctree

    settings = {
        "report_level": 5,
        "halt_level": 5,
        "warning_stream": io.StringIO(),
        "file_insertion_enabled": False,
        "raw_enabled": False,
        "syntax_highlight": "none",
        "doctitle_xform": True,
        "sectsubtitle_xform": False,
        "line_length_limit": 1_000_000,
        "_disable_config": True,
    }
    with _lock:
        _setup(text)
        _dropped_seen.clear()
        doctree = publish_doctree(text, settings_overrides=settings)
        dropped = list(_dropped_seen)
    title, blocks = _Walker().run(doctree)
    return title, blocks, dropped


def _inline_text(node) -> str:
    from docutils import nodes

    parts: list[str] = []
    for child in node.findall(include_self=False, descend=True, siblings=False):
        if isinstance(child, nodes.Text):
            parent = child.parent
            if isinstance(parent, (nodes.system_message, nodes.comment)) or any(
                isinstance(a, nodes.system_message) for a in _ancestors(child)
            ):
                continue
            value = str(child)
            if isinstance(parent, nodes.problematic):
                value = value.strip("|`_")  # an undefined |substitution| or unresolved `reference`_
            parts.append(value)
    return " ".join("".join(parts).split())


def _ancestors(node):
    parent = node.parent
    while parent is not None:
        yield parent
        parent = parent.parent


class _Walker:
    def __init__(self) -> None:
        self.blocks: list[Block] = []

    def run(self, doctree) -> tuple[Optional[str], list[Block]]:
        from docutils import nodes

        title = None
        offset = 0
        first = next((c for c in doctree.children if isinstance(c, nodes.title)), None)
        if first is not None:
            title = _inline_text(first)
            ids = [i for i in doctree.get("ids", []) if i]
            self.blocks.append(Block(1, title, "heading", _pick_id(title, ids)))
            offset = 1
        self._body(doctree.children, depth=offset)
        return title, self.blocks

    def _body(self, children, depth: int) -> None:
        from docutils import nodes

        for node in children:
            if isinstance(node, (nodes.title, nodes.subtitle)) and isinstance(node.parent, nodes.document):
                continue
            if isinstance(node, nodes.section):
                heading = next((c for c in node.children if isinstance(c, nodes.title)), None)
                text = _inline_text(heading) if heading is not None else ""
                if text:
                    self.blocks.append(Block(min(depth + 1, 6), text, "heading", _pick_id(text, node.get("ids", []))))
                self._body([c for c in node.children if c is not heading], depth + 1)
            elif isinstance(
                node,
                (
                    nodes.system_message,
                    nodes.comment,
                    nodes.target,
                    nodes.substitution_definition,
                    nodes.raw,
                    nodes.image,
                    nodes.meta if hasattr(nodes, "meta") else nodes.raw,
                    nodes.pending,
                    nodes.footnote,
                    nodes.citation,
                ),
            ):
                continue
            elif (
                isinstance(node, nodes.literal_block)
                or isinstance(node, nodes.doctest_block)
                or isinstance(node, nodes.math_block)
            ):
                code = node.astext().rstrip()
                if code.strip():
                    lang = " ".join(c for c in node.get("classes", []) if c != "code")
                    self.blocks.append(Block(0, f"```{lang}\n{code}\n```", "code"))
            elif isinstance(node, nodes.table):
                self._table(node)
            elif isinstance(node, (nodes.bullet_list, nodes.enumerated_list)):
                lines = self._list(node, 0)
                if lines:
                    self.blocks.append(Block(0, "\n".join(lines), "text"))
            elif isinstance(node, nodes.definition_list):
                lines = []
                for item in node.children:
                    term = next((c for c in item.children if isinstance(c, nodes.term)), None)
                    definition = next((c for c in item.children if isinstance(c, nodes.definition)), None)
                    lines.append(
                        f"{_inline_text(term) if term else ''}: {_inline_text(definition) if definition else ''}"
                    )
                self.blocks.append(Block(0, "\n".join(lines), "text"))
            elif isinstance(node, nodes.field_list):
                lines = []
                for field in node.children:
                    name = next((c for c in field.children if isinstance(c, nodes.field_name)), None)
                    body = next((c for c in field.children if isinstance(c, nodes.field_body)), None)
                    lines.append(f"{_inline_text(name) if name else ''}: {_inline_text(body) if body else ''}")
                self.blocks.append(Block(0, "\n".join(lines), "text"))
            elif isinstance(node, nodes.Admonition):
                label = type(node).__name__.replace("_", " ").capitalize()
                inner = _Walker()
                inner._body(node.children, depth)
                for i, block in enumerate(inner.blocks):
                    if i == 0 and block.kind == "text" and label != "Admonition":
                        block = block._replace(text=f"{label}: {block.text}")
                    self.blocks.append(block)
            elif isinstance(
                node, (nodes.paragraph, nodes.rubric, nodes.line_block, nodes.attribution, nodes.caption, nodes.legend)
            ):
                text = (
                    _inline_text(node)
                    if not isinstance(node, nodes.line_block)
                    else "\n".join(_inline_text(line) for line in node.children)
                )
                if text.strip():
                    self.blocks.append(Block(0, text, "text"))
            elif isinstance(node, nodes.Element):
                self._body(node.children, depth)  # container, block_quote, compound, topic, figure, ...

    def _list(self, node, indent: int) -> list[str]:
        from docutils import nodes

        lines: list[str] = []
        for i, item in enumerate(node.children, start=1):
            bullet = f"{i}." if isinstance(node, nodes.enumerated_list) else "-"
            own = [c for c in item.children if not isinstance(c, (nodes.bullet_list, nodes.enumerated_list))]
            text = " ".join(_inline_text(c) for c in own if _inline_text(c))
            lines.append(f"{'  ' * indent}{bullet} {text}")
            for sub in item.children:
                if isinstance(sub, (nodes.bullet_list, nodes.enumerated_list)):
                    lines.extend(self._list(sub, indent + 1))
        return lines

    def _table(self, table) -> None:
        from docutils import nodes

        caption = next((c for c in table.children if isinstance(c, nodes.title)), None)
        header: list[list[str]] = []
        body: list[list[str]] = []
        for group in table.findall(nodes.tgroup):
            for part in group.children:
                rows = [[_inline_text(entry) for entry in row.children] for row in part.findall(nodes.row)]
                (header if isinstance(part, nodes.thead) else body).extend(rows)
        if not header and body:
            header, body = [body[0]], body[1:]
        if caption is not None and _inline_text(caption):
            self.blocks.append(Block(0, _inline_text(caption), "text"))
        if header:
            self.blocks.append(Block(0, markdown_table(header[-1], body), "table"))


def _pick_id(title: str, ids: list[str]) -> Optional[str]:
    """The id docutils derived from the title when there is one, else the first explicit target."""
    from docutils.nodes import make_id

    auto = make_id(title)
    if auto in ids:
        return auto
    return ids[0] if ids else (auto or None)
