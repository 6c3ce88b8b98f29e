"""`roxie plot`: learning curves of synthetic run directories."""

import csv
import json
import struct

import numpy as np
import pytest

from roxie import cli
from roxie import plot

try:
  import matplotlib  # pylint: disable=unused-import
  HAVE_MPL = True
except ImportError:
  HAVE_MPL = False
needs_matplotlib = pytest.mark.skipif(
    not HAVE_MPL, reason="matplotlib is not installed (pip install 'roxie[plot]')")


def _make_run(path, agent, task, seed, steps, returns, wall=None,
              config=None):
  path.mkdir(parents=True)
  (path / 'config.json').write_text(json.dumps(
      {'agent': agent, 'task': task, 'seed': seed, 'backend': 'cpu',
       'steps': steps[-1], 'config': config or {'tau': 0.005}}))
  wall = wall if wall is not None else [s / 500. for s in steps]
  with open(path / 'metrics.csv', 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['env_steps', 'wall_time', 'eval_return', 'eval_return_std',
                'train_episode_return', 'sps', 'critic_loss'])
    for s, t, r in zip(steps, wall, returns):
      w.writerow([s, t, r, 1.0, r - 5, 500.0, 0.1])
  return str(path)


def _png_size(path):
  with open(path, 'rb') as f:
    head = f.read(24)
  assert head[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG'
  assert head[12:16] == b'IHDR'
  return struct.unpack('>II', head[16:24])


@pytest.fixture
def runs(tmp_path):
  rng = np.random.default_rng(0)
  dirs = []
  for seed in range(3):  # Three seeds of one setup, uneven eval points.
    steps = list(range(2_000, 40_001 - 4_000 * seed, 2_000 + 500 * seed))
    returns = [800 * (1 - np.exp(-s / 15_000)) + rng.normal(0, 30)
               for s in steps]
    dirs.append(_make_run(tmp_path / f'sac-{seed}', 'sac',
                          'CartpoleSwingup', seed, steps, returns))
  steps = list(range(5_000, 40_001, 5_000))
  dirs.append(_make_run(tmp_path / 'td3-0', 'td3', 'CartpoleSwingup', 0,
                        steps, [400 * s / 40_000 for s in steps]))
  return dirs


@needs_matplotlib
def test_plot_writes_a_png_of_the_requested_size(runs, tmp_path, capsys):
  out = tmp_path / 'figs' / 'curves.png'
  code = cli.main(['plot', *runs, '-o', str(out), '--width', '900',
                   '--height', '400', '--interval', 'minmax'])
  assert code == 0, capsys.readouterr().err
  assert _png_size(out) == (900, 400)
  assert '4 runs, 2 groups' in capsys.readouterr().out


@needs_matplotlib
def test_default_size_and_other_metric(runs, tmp_path):
  out = tmp_path / 'c.png'
  plot.plot_runs(runs[:1], str(out), metric='train_episode_return')
  assert _png_size(out) == (1200, 450)


def test_aggregate_interpolates_onto_the_shared_range():
  xs = [np.array([0., 10., 20.]), np.array([5., 15., 30.])]
  ys = [np.array([0., 10., 20.]), np.array([10., 20., 35.])]
  grid, mean, low, high = plot.aggregate(xs, ys, 'minmax', points=3)
  np.testing.assert_allclose(grid, [5., 12.5, 20.])
  np.testing.assert_allclose(low, [5., 12.5, 20.])
  np.testing.assert_allclose(high, [10., 17.5, 25.])
  np.testing.assert_allclose(mean, [7.5, 15., 22.5])
  _, mean, low, high = plot.aggregate(xs, ys, 'stderr', points=3)
  np.testing.assert_allclose(high - mean, [2.5, 2.5, 2.5])
  assert plot.aggregate([np.array([0., 1.]), np.array([2., 3.])],
                        [np.zeros(2), np.zeros(2)]) is None


def test_resumed_metrics_keep_the_latest_row_and_a_running_clock(tmp_path):
  # Resumed at 20k after logging up to 30k: 30k is logged again, and the
  # resumed process's clock starts at 0 again.
  d = _make_run(tmp_path / 'r', 'sac', 'PendulumSwingup', 1,
                [10_000, 20_000, 30_000, 30_000, 40_000],
                [1., 2., 3., 30., 40.], wall=[10., 20., 30., 5., 15.])
  run = plot.read_run(d)
  np.testing.assert_array_equal(run.env_steps, [1e4, 2e4, 3e4, 4e4])
  np.testing.assert_array_equal(run.value, [1., 2., 30., 40.])
  np.testing.assert_array_equal(run.wall_time, [10., 20., 35., 45.])


@pytest.mark.parametrize('setup, needle', [
    ('missing', 'is not a directory'),
    ('no_config', 'not a roxie run'),
    ('no_metrics', 'no metrics.csv'),
    ('empty_metrics', 'no rows'),
    ('bad_column', 'no column eval_return'),
])
def test_bad_run_dirs_fail_clearly_with_exit_2(tmp_path, capsys, setup,
                                               needle):
  d = tmp_path / 'run'
  if setup != 'missing':
    d.mkdir()
  if setup in ('no_metrics', 'empty_metrics', 'bad_column'):
    (d / 'config.json').write_text('{"agent": "sac", "task": "T"}')
  if setup == 'empty_metrics':
    (d / 'metrics.csv').write_text('env_steps,wall_time,eval_return\n')
  if setup == 'bad_column':
    (d / 'metrics.csv').write_text('env_steps,wall_time\n1,2\n')
  out = tmp_path / 'x.png'
  code = cli.main(['plot', str(d), '-o', str(out)])
  assert code == 2
  assert needle in capsys.readouterr().err
  assert not out.exists()


def test_missing_matplotlib_names_the_extra(runs, tmp_path, monkeypatch,
                                            capsys):
  import builtins  # pylint: disable=g-import-not-at-top
  real_import = builtins.__import__

  def no_matplotlib(name, *args, **kwargs):
    if name == 'matplotlib' or name.startswith('matplotlib.'):
      raise ImportError('No module named matplotlib')
    return real_import(name, *args, **kwargs)

  monkeypatch.setattr(builtins, '__import__', no_matplotlib)
  code = cli.main(['plot', runs[0], '-o', str(tmp_path / 'x.png')])
  assert code == 2
  assert "roxie[plot]" in capsys.readouterr().err


def test_runs_differing_in_a_setting_are_grouped_by_its_value(tmp_path,
                                                               capsys):
  # A population of 2 seeds x 2 critic_lr, as roxie train --sweep writes it
  # (and one run trained to a larger total: steps is not a setting).
  dirs = []
  for lr in (1e-3, 3e-3):
    for seed in (0, 1):
      steps = [1000, 2000] + ([3000] if (lr, seed) == (1e-3, 1) else [])
      dirs.append(_make_run(
          tmp_path / f'sac-seed{seed}-lr{lr}', 'sac', 'CheetahRun', seed,
          steps, [float(s) * lr for s in steps],
          config={'tau': 0.005, 'critic_lr': lr}))
  runs = [plot.read_run(d) for d in dirs]
  groups = plot.groups_of(runs)
  assert list(groups) == ['sac on CheetahRun, critic_lr=0.001',
                          'sac on CheetahRun, critic_lr=0.003']
  assert [[r.seed for r in g] for g in groups.values()] == [[0, 1], [0, 1]]
  # Without a differing setting: one group, labelled as before.
  assert list(plot.groups_of(runs[:2])) == ['sac on CheetahRun']
  out = tmp_path / 'sweep.png'
  assert cli.main(['plot', *dirs, '-o', str(out)]) == 0
  assert '(4 runs, 2 groups)' in capsys.readouterr().out
