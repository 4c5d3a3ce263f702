"""The prompt templates of kernelscout: jinja2 files read through importlib.resources.

Prompts live only here, so the text an LLM saw can always be traced to one file and its hash. The
environment is strict: a variable a template names but the caller did not pass is an error, never an
empty string that silently changes the prompt.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import re

import jinja2

from evaluation.errors import KscoutError


class PromptError(KscoutError):
    """A prompt template that does not exist, or a render that misses one of its variables."""


@functools.lru_cache(maxsize=None)
def _source(name: str) -> str:
    resource = importlib.resources.files(__name__).joinpath(f"{name}.j2")
    if not resource.is_file():
        raise PromptError(f"no prompt template named {name!r} (expected prompts/{name}.j2)")
    return resource.read_text(encoding="utf-8")


def _load(name: str):
    source = _source(name)
    return source, None, lambda: True


_ENV = jinja2.Environment(
    loader=jinja2.FunctionLoader(_load),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)


_INCLUDE = re.compile(r"""{%-?\s*include\s+["']([^"']+)["']""")


def _closure(name: str, seen: tuple[str, ...] = ()) -> list[str]:
    """The template and every partial it includes, in a fixed order (a cycle is a template error)."""
    if name in seen:
        raise PromptError(f"prompt {seen[0]!r} includes itself through {name!r}")
    out = [name]
    for included in _INCLUDE.findall(_source(name)):
        out += [n for n in _closure(included, seen + (name,)) if n not in out]
    return out


def template_sha256(name: str) -> str:
    """Identity recorded with each call: the template's source plus the partials it includes.

    Hashing the rendering would change with every problem; hashing only the file would miss an edit
    to a shared partial (`_problem.j2`), so the hash covers the whole include closure.
    """
    digest = hashlib.sha256()
    for part in _closure(name):
        digest.update(part.encode("utf-8") + b"\0" + _source(part).encode("utf-8") + b"\0")
    return digest.hexdigest()


def names() -> list[str]:
    """The prompts a caller may render; partials (leading underscore) are only included."""
    root = importlib.resources.files(__name__)
    return sorted(
        p.name[: -len(".j2")] for p in root.iterdir() if p.name.endswith(".j2") and not p.name.startswith("_")
    )


def render(name: str, **variables) -> tuple[str, str]:
    """Render template `name` and return (text, sha256 of the template source)."""
    sha = template_sha256(name)
    try:
        text = _ENV.get_template(name).render(**variables)
    except jinja2.UndefinedError as exc:
        raise PromptError(f"prompt {name!r}: {exc.message}") from None
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"prompt {name!r} line {exc.lineno}: {exc.message}") from None
    return text, sha
