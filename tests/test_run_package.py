"""roxie.run's modules: the order docs/ARCHITECTURE.md gives them, and sizes.

Each module of the package imports only the modules listed above it in the
doc's table (module-level imports and function-level ones alike, but for
the one exception the doc names), and the package keeps its functions short.
"""

import ast
import os
import re

ROOT = os.path.join(os.path.dirname(__file__), '..')
PACKAGE = os.path.join(ROOT, 'roxie', 'run')
# The doc's exception: new_run_config calls the schedule checks.
ALLOWED_UPWARD = {('config', 'schedules')}
MAX_FUNCTION_LINES = 80


def _doc_order():
  with open(os.path.join(ROOT, 'docs', 'ARCHITECTURE.md')) as f:
    return re.findall(r'^\| `roxie\.run\.(\w+)` \|', f.read(), re.M)


def _modules():
  return sorted(f[:-3] for f in os.listdir(PACKAGE)
                if f.endswith('.py') and f != '__init__.py')


def _run_imports(name):
  with open(os.path.join(PACKAGE, name + '.py')) as f:
    tree = ast.parse(f.read())
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module:
      if node.module.startswith('roxie.run.'):
        yield node.module.split('.')[2]
      elif node.module == 'roxie.run':
        for alias in node.names:
          yield alias.name


def test_the_doc_lists_every_module_of_the_package_once():
  order = _doc_order()
  assert sorted(order) == _modules(), order


def test_modules_import_only_those_above_them():
  order = _doc_order()
  upward = []
  for name in order:
    for dep in _run_imports(name):
      if (dep in order and order.index(dep) >= order.index(name)
          and (name, dep) not in ALLOWED_UPWARD):
        upward.append(f'roxie.run.{name} imports roxie.run.{dep}')
  assert not upward, upward


def test_no_function_in_the_package_is_over_80_lines():
  long = []
  for name in _modules() + ['__init__']:
    with open(os.path.join(PACKAGE, name + '.py')) as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        body_start = node.body[0]
        # Lines of code: the docstring does not count.
        if (isinstance(body_start, ast.Expr)
            and isinstance(body_start.value, ast.Constant)
            and isinstance(body_start.value.value, str)):
          first = body_start.end_lineno + 1
        else:
          first = node.lineno
        if node.end_lineno - first + 1 > MAX_FUNCTION_LINES:
          long.append(f'{name}.{node.name}: {node.end_lineno - first + 1}')
  assert not long, long


# --- signals, loggers and the program cache ----------------------------------


def test_a_signal_before_training_leaves_the_handlers_as_they_were():
  import signal  # pylint: disable=g-import-not-at-top
  import types  # pylint: disable=g-import-not-at-top

  import pytest  # pylint: disable=g-import-not-at-top
  from roxie import run  # pylint: disable=g-import-not-at-top

  before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  run.set_early_signals(types.SimpleNamespace(signum=signal.SIGTERM))
  try:
    with pytest.raises(run.Interrupted, match='before training started') as e:
      with run.StopRequest('some/run', enabled=True):
        raise AssertionError('the block must not run')
  finally:
    run.set_early_signals(None)
  assert e.value.exit_code == 143
  # A `with` does not call __exit__ when __enter__ raises: the handlers
  # must have been put back by __enter__ itself.
  assert {s: signal.getsignal(s) for s in before} == before


def test_the_loggers_take_the_same_row(tmp_path, capsys):
  import io  # pylint: disable=g-import-not-at-top
  from roxie import run  # pylint: disable=g-import-not-at-top

  row = {'env_steps': 80, 'wall_time': 12.34, 'eval_return': 19.98,
         'eval_return_std': 0.01, 'train_episode_return': 18.0, 'sps': 6.5,
         'q': 1.5, 'clipped_actions': 3, 'diverged_envs': 0,
         'nonfinite_params': 0}
  csv_log = run.logging._MetricsCsv(str(tmp_path / 'metrics.csv'))  # pylint: disable=protected-access
  progress = run.logging._Progress(100, 0, True, stream=io.StringIO())  # pylint: disable=protected-access
  loggers = [csv_log, progress]
  for logger in loggers:
    assert isinstance(logger, run.Logger)
    logger.write(row)
    logger.close()
  assert (tmp_path / 'metrics.csv').read_text().splitlines() == [
      ','.join(row), '80,12.34,19.98,0.01,18.0,6.5,1.5,3,0,0']
  assert capsys.readouterr().out == (
      'steps=80 eval_return=20.0 train_return=18.0 sps=6 time=12s '
      'clipped_actions=3\n')


def test_a_program_cache_belongs_to_its_caller():
  from roxie import run  # pylint: disable=g-import-not-at-top

  doc = {'agent': 'sac', 'task': 'PendulumSwingup', 'backend': 'cpu',
         'num_envs': 2, 'steps': 80, 'seed': 0,
         'env_options': {'episode_length': 20},
         'config': {'hidden_sizes': [8], 'batch_size': 8, 'warmup_steps': 8,
                    'replay_capacity': 64},
         'eval_every': 40, 'eval_episodes': 2, 'iterations_per_call': 5}
  base = run.RunConfig.from_json(doc)
  default_size = len(run.DEFAULT_PROGRAMS)
  cache = run.ProgramCache(max_size=2)
  first = cache.get(base)
  # Another seed shares the programs; other settings do not.
  assert cache.get(run.RunConfig.from_json(dict(doc, seed=7))) is first
  other = cache.get(run.RunConfig.from_json(dict(doc, num_envs=4)))
  assert other is not first and other.per_iter == 2 * first.per_iter
  assert len(cache) == 2
  cache.get(run.RunConfig.from_json(dict(doc, eval_episodes=3)))
  assert len(cache) == 2  # The oldest went.
  assert cache.get(base) is not first
  assert len(run.DEFAULT_PROGRAMS) == default_size  # Untouched.
