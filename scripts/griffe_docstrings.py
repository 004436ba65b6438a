"""A griffe extension (mkdocs.yml loads it for the API reference): queuetune's
docstrings are written for the terminal and for doctest, in reST's manner; on
the site their doctest examples become Python console blocks and their roles
(``:func:`~queuetune.watch```) code spans, so that Markdown reads neither as a
quotation nor as a link."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj|py:\w+):`(~?)([^`]+)`")


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


def markdown(text: str) -> str:
    r"""``text`` with its doctest examples fenced and its reST roles as code.

    >>> prompt = ">" * 3
    >>> markdown(f"See :func:`~queuetune.api.watch`.\n\n{prompt} 1 + 1\n2\n\nThen.").splitlines()
    ['See `watch`.', '', '```pycon', '>>> 1 + 1', '2', '```', '', 'Then.']
    """
    out: list[str] = []
    example = False
    for line in ROLE.sub(_role, text).splitlines():
        if line.lstrip().startswith(">>>") and not example:
            out.append("```pycon")
            example = True
        elif example and not line.strip():
            out.append("```")
            example = False
        out.append(line)
    if example:
        out.append("```")
    return "\n".join(out)


class DoctestsAsCode(griffe.Extension):
    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
