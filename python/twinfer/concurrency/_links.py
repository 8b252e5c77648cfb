"""Where a pipeline stage's inputs come from (see twinfer.Pipeline for the
rules): links parsed and checked once, then resolved per item.

>>> links = parse_links(members, {"b_input": "a_output"})
>>> feeds_for(members, links, 1, [a_outputs], item)
{'b_input': <twinfer.Tensor ...>}
"""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import InvalidArgumentError

ITEM = -1  # source stage index meaning "the submitted item"


def _as_outputs(result) -> Mapping:
    return result if isinstance(result, Mapping) else {"output": result}


def _stage_index(members, ref, before: int) -> int:
    if ref == "input":
        return ITEM
    if isinstance(ref, int):
        idx = ref
    else:
        idx = next((i for i, m in enumerate(members) if m.name == ref), None)
        if idx is None:
            raise InvalidArgumentError(f"link source: no stage named {ref!r}")
    if not 0 <= idx < before:
        raise InvalidArgumentError(f"stage {before} can only link to an earlier stage, not {ref!r}")
    return idx


def _source(members, src, stage: int) -> tuple[int, str]:
    if isinstance(src, str):
        return stage - 1, src
    if isinstance(src, tuple) and len(src) == 2 and isinstance(src[1], str):
        return _stage_index(members, src[0], stage), src[1]
    raise InvalidArgumentError(f"link source {src!r}: expected 'output' or (stage, 'output')")


def parse_links(members, links) -> list[dict[str, tuple[int, str]]]:
    """Per stage: {input name: (source stage index or ITEM, output name)}, checked
    against the engines' input and output names where they are known."""
    n = len(members)
    per_stage: list[dict] = [{} for _ in range(n)]
    if links is None:
        pass
    elif isinstance(links, (list, tuple)):
        if len(links) != n:
            raise InvalidArgumentError(f"links: {len(links)} entries for {n} stages")
        per_stage = [dict(x or {}) for x in links]
    elif isinstance(links, Mapping) and links and all(isinstance(v, Mapping) for v in links.values()):
        for ref, m in links.items():
            idx = ref if isinstance(ref, int) else next((i for i, s in enumerate(members) if s.name == ref), None)
            if idx is None or not 0 <= idx < n:
                raise InvalidArgumentError(f"links: no stage {ref!r}")
            per_stage[idx] = dict(m)
    elif isinstance(links, Mapping):
        for inp, src in links.items():
            targets = [i for i, m in enumerate(members)
                       if i > 0 and m.engine is not None and inp in {s.name for s in m.engine.inputs}]
            if not targets:
                raise InvalidArgumentError(f"links: no stage after the first has an input named {inp!r}")
            for i in targets:
                per_stage[i][inp] = src
    else:
        raise InvalidArgumentError(f"links must be a dict or a list, not {type(links).__name__}")


    out = []
    for i, (m, stage_links) in enumerate(zip(members, per_stage)):
        if stage_links and (i == 0 or m.engine is None):
            raise InvalidArgumentError(f"stage '{m.name}': links apply to engine stages after the first")
        resolved = {}
        for inp, src in stage_links.items():
            if inp not in {s.name for s in m.engine.inputs}:
                raise InvalidArgumentError(f"stage '{m.name}' has no input {inp!r}")
            idx, name = resolved[inp] = _source(members, src, i)
            source = members[idx] if idx != ITEM else None
            if source is not None and source.engine is not None and name not in {s.name for s in source.engine.outputs}:
                raise InvalidArgumentError(f"link {inp!r} <- {name!r}: stage '{source.name}' has no output {name!r}; "
                                           f"its outputs are {[s.name for s in source.engine.outputs]}")
        out.append(resolved)
    return out


def feeds_for(members, links_per_stage, i: int, results: list, item) -> dict:
    """Inputs of engine stage i from the links, the previous outputs and the item."""
    names = [s.name for s in members[i].engine.inputs]
    if i == 0:
        if not isinstance(item, Mapping):
            raise InvalidArgumentError(f"an item for stage '{members[0].name}' must be a dict of inputs")
        return {k: item[k] for k in names if k in item}
    prev = _as_outputs(results[i - 1])
    links = links_per_stage[i]
    feeds, used, left = {}, set(), []
    for n in names:
        if n in links:
            idx, out = links[n]
            src = item if idx == ITEM else _as_outputs(results[idx])
            if not isinstance(src, Mapping) or out not in src:
                where = "the item" if idx == ITEM else f"stage '{members[idx].name}'"
                raise InvalidArgumentError(f"stage '{members[i].name}': input {n!r} links to {out!r}, "
                                           f"which {where} did not produce")
            feeds[n] = src[out]
            if idx == i - 1:
                used.add(out)  # taken by its link: not also the "one output left" for another input
        elif n in prev:
            feeds[n] = prev[n]
            used.add(n)
        else:
            left.append(n)
    # Inputs with a default (override_initializers=) take it unless the
    # item gives them; they never take a previous stage's unnamed output.
    defaults = getattr(members[i], "engine", None)
    defaults = defaults._defaults if defaults is not None else {}
    defaulted = [n for n in left if n in defaults]
    left = [n for n in left if n not in defaults]
    unused = [k for k in prev if k not in used]
    if len(left) == 1 and len(prev) == 1 and len(unused) == 1:
        feeds[left.pop()] = prev[unused[0]]
    for n in list(left) + defaulted:
        if isinstance(item, Mapping) and n in item:
            feeds[n] = item[n]
            if n in left:
                left.remove(n)
    if left:
        raise InvalidArgumentError(f"stage '{members[i].name}': no source for input(s) {left}; the previous "
                                   f"stage gave {list(prev)} — add links={{...}}")
    return feeds


def static_sources(members, links_per_stage) -> tuple[list[list[tuple[int, str]]], list[str]]:
    """``feeds_for``'s rules resolved once from the engines' names, for a
    pipeline of engines only (a captured graph's wiring): per stage, per
    input, (source stage or ITEM, name); and the item entries the stages read."""
    item_names: list[str] = []
    out: list[list[tuple[int, str]]] = []
    for i, m in enumerate(members):
        names = [s.name for s in m.engine.inputs]
        if i == 0:
            out.append([(ITEM, n) for n in names])
            item_names += [n for n in names if n not in item_names]
            continue
        prev = [s.name for s in members[i - 1].engine.outputs]
        links = links_per_stage[i]
        got: dict[str, tuple[int, str]] = {}
        used, left = set(), []
        for n in names:
            if n in links:
                got[n] = links[n]
                if links[n][0] == i - 1:
                    used.add(links[n][1])
            elif n in prev:
                got[n] = (i - 1, n)
                used.add(n)
            else:
                left.append(n)
        defaults = members[i].engine._defaults  # from the item if it has them, else the default
        rest = [n for n in left if n not in defaults]
        unused = [k for k in prev if k not in used]
        if len(rest) == 1 and len(prev) == 1 and len(unused) == 1:
            got[rest[0]] = (i - 1, unused[0])
            left.remove(rest[0])
        for n in left:
            got[n] = (ITEM, n)  # the item must carry it
        for src, name in got.values():
            if src == ITEM and name not in item_names:
                item_names.append(name)
        out.append([got[n] for n in names])
    return out, item_names
