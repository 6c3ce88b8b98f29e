"""README's two tables of the defaults' DMC cells agree with DMC.md's grid.

DMC.md is written from dmc.csv by benchmarks/dmc_report.py; the README's
tables are written by hand from its grid ("Where each default stands").
When a default changes or its rows do, the grid moves and the README must
follow: this fails until it does. (After TD4's one-step relabel both of
its rows had to be rewritten by hand; the README of the commit before,
against today's DMC.md, fails here.)
"""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = ('CartpoleSwingup', 'ReacherEasy', 'FingerSpin', 'CheetahRun',
         'WalkerWalk', 'BallInCup')
NAMES = {'ddpg': 'DDPG', 'td3': 'TD3', 'd4pg': 'D4PG', 'td4': 'TD4',
         'sac': 'SAC', 'mpo': 'MPO'}  # PPO's rows are its own budget's.


def _cells(line):
  return [c.strip() for c in line.strip().strip('|').split('|')]


def grid():
  """{(recipe, '100k' | '500k'): {task: 'met' | 'IQM (-gap)' | ...}}."""
  with open(os.path.join(ROOT, 'benchmarks', 'results', 'DMC.md')) as f:
    lines = f.read().split('\n')
  start = lines.index(next(l for l in lines
                           if l.startswith('| recipe | env steps |')))
  header = _cells(lines[start])
  out = {}
  for line in lines[start + 2:]:
    if not line.startswith('|'):
      break
    cells = dict(zip(header, _cells(line)))
    if cells['recipe'] not in NAMES:
      continue
    out[cells['recipe'], cells['env steps']] = {
        t: 'met' if cells[t].endswith(' met')  # '964 met'
        else cells[t].replace(', CI reaches)', '†)') for t in TASKS}
  return out


def readme_tables():
  """{(recipe, budget): (tasks met, {task: 'IQM (-gap)'})} from README."""
  with open(os.path.join(ROOT, 'README.md')) as f:
    lines = f.read().split('\n')
  out = {}
  for budget, header in (('100k', '| recipe | 100k | meets its 100k target'),
                         ('500k', '| recipe | meets at 500k | short at 500k')):
    start = lines.index(next(l for l in lines if l.startswith(header)))
    for line in lines[start + 2:]:
      if not line.startswith('|'):
        break
      cells = _cells(line)
      recipe = {v: k for k, v in NAMES.items()}.get(cells[0])
      if recipe is None:
        continue
      met, short = (cells[2], cells[3]) if budget == '100k' else cells[1:3]
      shorts = {}
      for item in filter(None, (s.strip() for s in short.split('),'))):
        task, rest = item.split(' ', 1)
        shorts[task] = rest if rest.endswith(')') else rest + ')'
      out[recipe, budget] = (
          {t.strip() for t in met.split(',')} - {''}, shorts)
  return out


def test_the_readme_tables_hold_every_default_cell():
  tables = readme_tables()
  assert set(tables) == {(r, b) for r in NAMES for b in ('100k', '500k')}


def differences(cells, met, shorts):
  """What a README row (met, shorts) says unlike DMC.md's cells."""
  out = []
  if met != {t for t, c in cells.items() if c == 'met'}:
    out.append(f'met {sorted(met)}')
  want = {t: c for t, c in cells.items() if c != 'met'}
  out += [f'{t}: README {shorts.get(t)}, DMC.md {want.get(t)}'
          for t in sorted(set(want) | set(shorts))
          if shorts.get(t) != want.get(t)]
  return out


@pytest.mark.parametrize('budget', ['100k', '500k'])
@pytest.mark.parametrize('recipe', sorted(NAMES))
def test_the_readme_says_what_dmc_md_says(recipe, budget):
  assert differences(grid()[recipe, budget],
                     *readme_tables()[recipe, budget]) == []


def test_a_stale_readme_row_is_caught():
  # The check itself: TD4's 500k row as the README gave it before its
  # one-step relabel, against the grid after it.
  cells = {'CartpoleSwingup': 'met', 'ReacherEasy': '897 (-26†)',
           'FingerSpin': '911 (-12†)', 'CheetahRun': '759 (-36)',
           'WalkerWalk': 'met', 'BallInCup': 'met'}
  stale = ({'CartpoleSwingup', 'ReacherEasy'}, {
      'FingerSpin': '677 (-246)', 'CheetahRun': '673 (-122)',
      'WalkerWalk': '902 (-46†)', 'BallInCup': '963 (-11†)'})
  assert len(differences(cells, *stale)) == 6  # met, and five tasks.
  assert differences(cells, {'CartpoleSwingup', 'WalkerWalk', 'BallInCup'},
                     {t: c for t, c in cells.items() if c != 'met'}) == []
