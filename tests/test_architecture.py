"""The layers of docs/ARCHITECTURE.md, checked on the import graph.

Every `import` of a roxie module anywhere in a file (module level or inside a
function) is an edge. A module may import its own package and the layers
below its own, never a layer above; `roxie.losses` imports nothing of roxie's
but `roxie.types`. A new module must be given a layer here and in the doc.
"""

import ast
import os
import re

import pytest

ROOT = os.path.join(os.path.dirname(__file__), '..')

# Lowest first. Must match the table in docs/ARCHITECTURE.md.
LAYERS = (
    ('roxie.types',),
    ('roxie.losses', 'roxie.optim', 'roxie.stats', 'roxie.gl'),
    ('roxie.networks',),
    ('roxie.buffers',),
    ('roxie.envs',),
    ('roxie.distributed',),
    ('roxie.loops',),
    ('roxie.agents',),
    ('roxie.config', 'roxie.checkpoint', 'roxie.run', 'roxie.export',
     'roxie.play', 'roxie.plot', 'roxie.cli', 'roxie.policies'),
)
# roxie.losses is imported by users into other codebases: it stays a leaf.
LEAVES = {'roxie.losses': ('roxie.types',)}
# The application layer's modules may import each other.
SAME_LAYER_OK = {len(LAYERS) - 1}


def _layer_of(module: str):
  best = None
  for i, names in enumerate(LAYERS):
    for name in names:
      if module == name or module.startswith(name + '.'):
        if best is None or len(name) > len(best[1]):
          best = (i, name)
  return best


def _modules():
  """(module name, path) of every Python file in roxie/ and agents/."""
  for top, package in (('roxie', 'roxie'), ('agents', 'roxie.agents')):
    base = os.path.join(ROOT, top)
    for dirpath, dirnames, filenames in os.walk(base):
      dirnames[:] = [d for d in dirnames if d != '__pycache__']
      for f in filenames:
        if not f.endswith('.py'):
          continue
        rel = os.path.relpath(os.path.join(dirpath, f), base)[:-3]
        parts = [p for p in rel.split(os.sep) if p != '__init__']
        yield '.'.join([package] + parts), os.path.join(dirpath, f)


def _imports(path: str, module: str):
  """The roxie modules `path` imports, resolved to full names."""
  with open(path) as f:
    tree = ast.parse(f.read(), path)
  is_package = path.endswith('__init__.py')
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = module.split('.')
        base = base[:len(base) - node.level + (1 if is_package else 0)]
        prefix = '.'.join(base + ([node.module] if node.module else []))
      else:
        prefix = node.module or ''
      if not prefix.startswith('roxie'):
        continue
      if prefix == 'roxie':  # `from roxie import losses, run`
        for alias in node.names:
          yield f'roxie.{alias.name}'
      else:
        yield prefix


def _violations(modules=None):
  found = []
  for module, path in (modules if modules is not None else _modules()):
    own = _layer_of(module)
    if own is None:
      if module == 'roxie':
        continue
      found.append(f'{module}: no layer; add it to docs/ARCHITECTURE.md and '
                   'LAYERS in tests/test_architecture.py')
      continue
    own_layer, own_package = own
    for target in _imports(path, module):
      if not re.match(r'roxie(\.|$)', target) or target == 'roxie':
        continue
      dep = _layer_of(target)
      if dep is None:
        continue  # Reported as a module without a layer above.
      dep_layer, dep_package = dep
      if dep_package == own_package:
        continue
      if own_package in LEAVES:
        if dep_package not in LEAVES[own_package]:
          found.append(f'{module} imports {target}: {own_package} may import '
                       f'only {LEAVES[own_package]}')
        continue
      if dep_layer > own_layer or (dep_layer == own_layer
                                   and own_layer not in SAME_LAYER_OK):
        found.append(f'{module} imports {target}, which is not below it '
                     f'({own_package} is layer {own_layer}, {dep_package} '
                     f'layer {dep_layer})')
  return found


def test_imports_point_down_only():
  violations = _violations()
  assert not violations, '\n'.join(violations)


def test_doc_lists_every_layer():
  with open(os.path.join(ROOT, 'docs', 'ARCHITECTURE.md')) as f:
    doc = f.read()
  for names in LAYERS:
    for name in names:
      assert f'`{name}`' in doc, f'docs/ARCHITECTURE.md does not name {name}'


@pytest.mark.parametrize('source, expected', [
    ('from roxie import run\n', 'roxie.loops.bad imports roxie.run'),
    ('import roxie.agents.sac\n', 'roxie.loops.bad imports roxie.agents.sac'),
    ('from ..agents import sac\n', 'roxie.loops.bad imports roxie.agents'),
])
def test_the_check_catches_an_upward_import(tmp_path, source, expected):
  path = tmp_path / 'bad.py'
  path.write_text(source)
  violations = _violations([('roxie.loops.bad', str(path))])
  assert len(violations) == 1 and violations[0].startswith(expected), violations


def test_the_check_allows_downward_and_own_package_imports(tmp_path):
  path = tmp_path / 'ok.py'
  path.write_text('from roxie import envs, buffers\nfrom roxie.loops import '
                  'collect\nfrom . import evaluate\n')
  assert _violations([('roxie.loops.ok', str(path))]) == []


def test_the_check_keeps_losses_a_leaf(tmp_path):
  path = tmp_path / 'bad.py'
  path.write_text('from roxie import networks\nfrom roxie.types import Array\n')
  assert _violations([('roxie.losses.bad', str(path))]) == [
      'roxie.losses.bad imports roxie.networks: roxie.losses may import only '
      "('roxie.types',)"]
