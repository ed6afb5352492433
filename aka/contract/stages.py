"""An op whose baseline is written as one file per stage (the contract's modules.stages) gets one module
rendered from them, because every tool downstream (the policy, the gate, the LLM's edits, a promotion)
takes a candidate as one self-contained file.

The render is plain text, so a stage reads in the module as it reads in its file: the first stage's
docstring opens the module; every stage's absolute imports are merged (first seen first, `__future__`
ahead); each stage's imports of its sibling stages are dropped (one namespace now); then each stage's
code after its imports, in the listed order, under a banner with the stage's file name and docstring.
"""

from __future__ import annotations

import ast
from pathlib import Path

from aka.errors import ContractError

BANNER = ("# Rendered by aka from the stage files the contract lists (modules.stages):\n#   {files}\n"
          "# Edit those files, not this one: it is rendered again whenever one of them changes.\n")


def _split(path: Path, source: str) -> tuple[str | None, str | None, list[str], str]:
    """(docstring, its source text, absolute import statements, code after the leading docstring and
    import block)."""
    try:
        body = ast.parse(source, str(path)).body
    except SyntaxError as e:
        raise ContractError(f"{path}: stage file does not parse ({e.msg}, line {e.lineno}): fix it") from e
    doc, doc_src, i = None, None, 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        doc, doc_src, i = body[0].value.value, ast.get_source_segment(source, body[0]), 1
    imports, end = [], body[i - 1].end_lineno if i else 0
    while i < len(body) and isinstance(body[i], (ast.Import, ast.ImportFrom)):
        node = body[i]
        if not (isinstance(node, ast.ImportFrom) and node.level):  # a sibling stage: same module once rendered
            imports.append(ast.get_source_segment(source, node) or ast.unparse(node))
        end, i = node.end_lineno, i + 1
    rest = source.splitlines(keepends=True)[end or 0:]
    return doc, doc_src, imports, "".join(rest).strip("\n") + "\n"


def render_stages(paths: list[Path], root: Path) -> str:
    """One module from the stage files, in order (pure: the files' text in, the module's text out)."""
    parts = []
    for p in paths:
        try:
            parts.append((p, *_split(p, p.read_text())))
        except OSError as e:
            raise ContractError(f"{p}: stage file named by the contract cannot be read ({e.strerror}): "
                                "restore it or fix modules.stages") from e
    imports: list[str] = []
    for _, _, _, imps, _ in parts:
        imports += [s for s in imps if s not in imports]
    future = [s for s in imports if s.startswith("from __future__")]
    imports = future + ([""] if future else []) + [s for s in imports if s not in future]
    rel = [p.relative_to(root) if p.is_relative_to(root) else p for p in paths]
    folder = rel[0].parent
    names = (f"{folder}/{{{', '.join(p.name for p in rel)}}}" if all(p.parent == folder for p in rel)
             else ", ".join(map(str, rel)))
    head_doc = parts[0][2]  # verbatim, escapes and all
    out = [BANNER.format(files=names)]
    if head_doc is not None:
        out.append(f"{head_doc}\n\n")
    out.append("\n".join(imports) + "\n")
    for p, doc, _, _, code in parts:
        title = f"# {'-' * 94}\n# {p.name}"
        if doc is not None and p is not parts[0][0]:
            title += "".join(f"\n# {line}".rstrip() for line in doc.strip().splitlines())
        out.append(f"\n\n{title}\n\n{code}")
    return "".join(out)
