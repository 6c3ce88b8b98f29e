"""Relabels one recipe's benchmark rows after a variant becomes its default.

A row's variant and overrides say what it trained relative to the recipe's
default Config at the time. When the default changes, the rows written
before say the wrong thing: the old default's rows are no longer `default`,
and the variant that became the default still lists as overrides what is
now the default. This rewrites one recipe's rows relative to the new
default, so DMC.md (and HUMANOID.md) compare like with like and dmc.py
resumes the right folders:

  - the rows of the variant that became the default (`--new`) become
    `default`, overrides empty; its overrides must be exactly the changed
    fields at their new values;
  - the old default's rows become `--old-name`, their overrides the changed
    fields at their old values (`--was FIELD=VALUE`, one per changed field);
  - every other variant of the recipe keeps its name (unless `--rename
    OLD=NEW`) and trained the old values of the changed fields it did not
    set itself: those are added to its overrides, and overrides now equal
    to the default are dropped.

Other recipes' rows are not touched. Results files (a column `overrides`:
dmc.csv, humanoid.csv) get names and overrides; curves files (no such
column: dmc_curves.csv, humanoid_curves.csv) the names only. Every file is
checked before any is written, and each is written whole to a temporary
file moved over the original, so bad input (exit 2) writes nothing and a
kill leaves each file old or new, never half. It holds dmc.py's locks on
the files throughout, so it can run beside benchmark jobs: their appends
wait and land in the new files.

  python benchmarks/relabel_default.py --agent d4pg --new lr1e-3-obsnorm \\
      --old-name lr3e-4-noobsnorm --was actor_lr=3e-4 --was critic_lr=3e-4 \\
      --was normalize_observations=false --rename obsnorm=lr3e-4 \\
      benchmarks/results/dmc.csv benchmarks/results/dmc_curves.csv \\
      benchmarks/results/humanoid.csv benchmarks/results/humanoid_curves.csv

With `--runs DIR` (repeatable) it moves the recipe's run folders to match,
so dmc.py resumes and extends the right runs (it keeps a variant's under
`DIR/<variant>/`, the default's directly under `DIR/`): the old default's
into `DIR/<old-name>/`, `--new`'s up into `DIR/`, and each renamed
variant's to its new name. A folder that would land on an existing one, or
that a process is training (its `.lock` held), stops it before anything
is written or moved.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import os
import re
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import dmc  # Its lock on the result CSVs; this script's folder is on the path.


class RelabelError(ValueError):
  """Bad input: nothing was written."""


def parse_overrides(text: str) -> Dict[str, str]:
  """'a=1;b=x' (dmc.py's overrides column) -> {'a': '1', 'b': 'x'}."""
  out = {}
  for item in filter(None, text.split(';')):
    key, sep, value = item.partition('=')
    if not sep or not key:
      raise RelabelError(f'overrides item {item!r} is not FIELD=VALUE')
    out[key] = value
  return out


def format_overrides(items: Mapping[str, str]) -> str:
  """The inverse of `parse_overrides`, sorted as dmc.py writes them."""
  return ';'.join(f'{k}={v}' for k, v in sorted(items.items()))


def same_value(a: str, b: str) -> bool:
  """Whether two `--set` texts give one value: 1e-3 and 0.001, True and
  true."""
  if a == b:
    return True
  booleans = {'true': True, 'false': False}
  if a.lower() in booleans and b.lower() in booleans:
    return booleans[a.lower()] == booleans[b.lower()]
  try:
    return float(a) == float(b)
  except ValueError:
    return False


def relabel_row(row: Dict[str, str], new: str, old_name: str,
                was: Mapping[str, str], now: Mapping[str, str],
                rename: Mapping[str, str]) -> Dict[str, str]:
  """One row of the recipe, relabelled (a copy; see the module docstring).

  `now` holds the changed fields' new values (the `--new` variant's
  overrides); rows without an `overrides` column get the name only.
  """
  out = dict(row)
  variant = row['variant']
  has_overrides = 'overrides' in row
  if variant == new:
    out['variant'] = 'default'
    if has_overrides:
      out['overrides'] = ''
    return out
  if variant == 'default':
    out['variant'] = old_name
    if has_overrides:
      out['overrides'] = format_overrides(was)
    return out
  out['variant'] = rename.get(variant, variant)
  if has_overrides:
    items = dict(was)
    items.update(parse_overrides(row['overrides']))
    items = {k: v for k, v in items.items()
             if not (k in now and same_value(v, now[k]))}
    if not items:
      raise RelabelError(
          f'variant {variant!r} trains the new default itself: merge its rows '
          'into --new by hand, or drop them')
    out['overrides'] = format_overrides(items)
  return out


def _read(path: str) -> Tuple[List[str], List[Dict[str, str]]]:
  try:
    with open(path, newline='') as f:
      reader = csv.DictReader(f)
      rows = list(reader)
      header = list(reader.fieldnames or [])
  except OSError as e:
    raise RelabelError(f'cannot read {path}: {e.strerror}') from e
  if 'agent' not in header or 'variant' not in header:
    raise RelabelError(f'{path} has no agent and variant columns: not a '
                       'results or curves CSV')
  return header, rows


def plan(paths: Sequence[str], agent: str, new: str, old_name: str,
         was: Mapping[str, str], rename: Mapping[str, str]
         ) -> List[Tuple[str, List[str], List[Dict[str, str]], int]]:
  """Every file's relabelled rows, checked; (path, header, rows, changed).

  Raises:
    RelabelError: on bad input (nothing is written).
  """
  if not was:
    raise RelabelError('name each changed field\'s old value: --was '
                       'FIELD=VALUE')
  for name in (old_name, *rename.values()):
    if name in ('default', new):
      raise RelabelError(f'{name!r} cannot be a new name: it is the default '
                         'or the variant that becomes it')
  if new in rename or 'default' in rename:
    raise RelabelError('--rename renames the other variants, not --new or '
                       'default')
  files = [(path, *_read(path)) for path in paths]
  now: Optional[Dict[str, str]] = None
  found = False
  for path, header, rows in files:
    mine = [r for r in rows if r['agent'] == agent]
    taken = {r['variant'] for r in mine} & ({old_name} | set(rename.values()))
    if taken:
      raise RelabelError(f'{path}: {agent} already has variant(s) '
                         f'{sorted(taken)}; pick other names')
    for r in mine:
      if r['variant'] != new:
        continue
      found = True
      if 'overrides' not in r:
        continue
      got = parse_overrides(r['overrides'])
      if now is None:
        now = got
      if set(got) != set(was) or got != now:
        raise RelabelError(
            f'{path}: variant {new!r} has overrides {r["overrides"]!r}; it '
            f'must set exactly the --was fields {sorted(was)}, the same in '
            'every row')
  if not found:
    raise RelabelError(f'no {agent} rows of variant {new!r} in '
                       f'{", ".join(paths)}')
  if now is None:
    raise RelabelError(f'no results file (with an overrides column) among '
                       f'{", ".join(paths)} gives {new!r}\'s values')
  out = []
  for path, header, rows in files:
    changed = 0
    new_rows = []
    for r in rows:
      if r['agent'] == agent:
        r = relabel_row(r, new, old_name, was, now, rename)
        changed += 1
      new_rows.append(r)
    out.append((path, header, new_rows, changed))
  return out


def write(path: str, header: Sequence[str], rows: Sequence[Mapping[str, str]]):
  """Writes the CSV whole beside `path`, then moves it over `path`."""
  tmp = path + '.tmp'
  with open(tmp, 'w', newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(header), lineterminator='\r\n')
    writer.writeheader()
    writer.writerows(rows)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def plan_moves(runs: Sequence[str], agent: str, new: str, old_name: str,
               rename: Mapping[str, str]) -> List[Tuple[str, str]]:
  """The (from, to) folder moves under each runs folder, in order.

  The old default's runs leave `DIR/` before `--new`'s arrive there, so a
  seed's folder may take the name its old default's run just left.
  """
  member = re.compile(rf'^{re.escape(agent)}-[A-Za-z0-9]+-seed\d+$')

  def runs_in(folder):
    if not os.path.isdir(folder):
      return []
    return sorted(n for n in os.listdir(folder) if member.match(n)
                  and os.path.isdir(os.path.join(folder, n)))

  moves = []
  for root in runs:
    if not os.path.isdir(root):
      raise RelabelError(f'--runs {root} is not a directory')
    steps = [(root, os.path.join(root, old_name))]
    steps += [(os.path.join(root, a), os.path.join(root, b))
              for a, b in rename.items()]
    steps.append((os.path.join(root, new), root))
    for src_dir, dst_dir in steps:
      moves += [(os.path.join(src_dir, n), os.path.join(dst_dir, n))
                for n in runs_in(src_dir)]
  left = set()
  for src, dst in moves:
    if os.path.exists(dst) and dst not in left:
      raise RelabelError(f'cannot move {src} to {dst}: {dst} exists; move '
                         'one aside first')
    left.add(src)
  return moves


@contextlib.contextmanager
def hold_runs(folders: Sequence[str]):
  """Holds each run's `.lock` (roxie's, while it trains) without waiting."""
  with contextlib.ExitStack() as stack:
    for folder in folders:
      path = os.path.join(folder, '.lock')
      if not os.path.exists(path):
        continue
      f = stack.enter_context(open(path, 'a'))
      try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError:
        raise RelabelError(f'{folder} is being trained right now (its .lock '
                           'is held); stop that job first') from None
    yield


def _pairs(items: Sequence[str], flag: str) -> Dict[str, str]:
  out = {}
  for item in items:
    key, sep, value = item.partition('=')
    if not sep or not key or not value:
      raise RelabelError(f'{flag} takes NAME=VALUE, got {item!r}')
    out[key] = value
  return out


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(
      description=__doc__.split('\n')[0],
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('files', nargs='+', help='results and curves CSVs')
  parser.add_argument('--agent', required=True)
  parser.add_argument('--new', required=True,
                      help='the variant that became the default')
  parser.add_argument('--old-name', required=True,
                      help='the variant the old default\'s rows become')
  parser.add_argument('--was', action='append', default=[],
                      metavar='FIELD=VALUE',
                      help='a changed field\'s old default (repeat per field)')
  parser.add_argument('--rename', action='append', default=[],
                      metavar='OLD=NEW', help='rename another variant')
  parser.add_argument('--runs', action='append', default=[], metavar='DIR',
                      help='a dmc.py --runs folder whose run folders to move '
                           '(repeatable)')
  args = parser.parse_args(argv)
  try:
    was, rename = _pairs(args.was, '--was'), _pairs(args.rename, '--rename')
    plan(args.files, args.agent, args.new, args.old_name, was, rename)
    moves = plan_moves(args.runs, args.agent, args.new, args.old_name,
                       rename)
    with hold_runs([src for src, _ in moves]):
      pass  # None is being trained (checked again below, held throughout).
  except RelabelError as e:  # Checked before any lock file is made.
    print(f'relabel_default.py: {e}', file=sys.stderr)
    return 2
  # Planned again under dmc.py's lock on each file, held from read to move:
  # a job appending its rows meanwhile waits, then appends to the new file
  # (unlocked, an append after the read went to the old file, and was lost
  # with it). Rows appended between the two plans are planned with the rest.
  with dmc.locked_all(args.files), contextlib.ExitStack() as runs_held:
    try:
      planned = plan(args.files, args.agent, args.new, args.old_name, was,
                     rename)
      moves = plan_moves(args.runs, args.agent, args.new, args.old_name,
                         rename)
      runs_held.enter_context(hold_runs([src for src, _ in moves]))
    except RelabelError as e:
      print(f'relabel_default.py: {e}', file=sys.stderr)
      return 2
    for path, header, rows, changed in planned:
      if changed:
        write(path, header, rows)
      print(f'{path}: {changed} {args.agent} rows relabelled')
    for src, dst in moves:
      os.makedirs(os.path.dirname(dst), exist_ok=True)
      os.rename(src, dst)
      print(f'moved {src} -> {dst}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
