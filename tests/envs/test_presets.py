"""Physics presets (roxie.envs.presets): the default is dm_control's model,
'playground' sets exactly mujoco_playground's solver options, per domain.

The expected values below are copied by hand from mujoco_playground's
`mujoco_playground/_src/dm_control_suite/xmls/<domain>.xml` `<option>` and
`<flag>` elements (github.com/google-deepmind/mujoco_playground, commit
d5e6b475), not from roxie's table, so a typo in either fails here.
"""

import dataclasses

import mujoco
import numpy as np
import pytest

import roxie.envs as envs
from roxie.envs import common

_EULERDAMP = 'EULERDAMP'
# domain: (iterations, ls_iterations, integrator, disabled flags); every XML
# leaves solver (Newton) and cone (pyramidal) at MuJoCo's defaults.
_PLAYGROUND_XML = {
    'acrobot': (2, 4, 'EULER', {'CONSTRAINT', _EULERDAMP}),
    'ball_in_cup': (1, 4, 'EULER', {_EULERDAMP}),
    'cartpole': (1, 4, 'EULER', {'CONTACT', _EULERDAMP}),
    'cheetah': (4, 8, 'EULER', {_EULERDAMP}),
    'finger': (2, 8, 'IMPLICITFAST', {'GRAVITY', _EULERDAMP}),
    'fish': (2, 6, 'EULER', {'GRAVITY', 'CONSTRAINT', 'CONTACT', _EULERDAMP}),
    'hopper': (4, 10, 'EULER', {_EULERDAMP}),
    'humanoid': (4, 8, 'EULER', {_EULERDAMP}),
    'pendulum': (4, 8, 'EULER', {'CONTACT', _EULERDAMP}),
    'point_mass': (1, 4, 'EULER', {'CONTACT', _EULERDAMP}),
    'reacher': (1, 6, 'EULER', {'CONTACT', _EULERDAMP}),
    'swimmer': (4, 8, 'EULER', {'CONTACT', _EULERDAMP}),
    'walker': (2, 5, 'EULER', {_EULERDAMP}),
}
# The only mjOption fields the preset may change.
_PRESET_FIELDS = {'iterations', 'ls_iterations', 'integrator', 'cone',
                  'solver', 'disableflags'}


def _options(model):
  """model.opt as {field: value} (arrays as tuples)."""
  out = {}
  for name in dir(model.opt):
    if name.startswith('_'):
      continue
    value = getattr(model.opt, name)
    if callable(value):
      continue
    out[name] = tuple(np.ravel(value)) if np.ndim(value) else value
  return out


def _flags(names):
  bits = 0
  for name in names:
    bits |= int(getattr(mujoco.mjtDisableBit, f'mjDSBL_{name}'))
  return bits


@pytest.mark.parametrize('name', envs.list_tasks())
def test_default_is_dm_control_model(name):
  """The default model's options are dm_control's (energy flag aside)."""
  task = envs.get_task(name)
  ours = _options(common.prepare_model(task))
  theirs = _options(task.load_model())
  theirs['enableflags'] = ours['enableflags']  # mjENBL_ENERGY, no dynamics.
  assert ours == theirs
  assert ours == _options(common.prepare_model(task, 'dm_control'))


@pytest.mark.parametrize('name', envs.list_tasks())
def test_playground_sets_exactly_its_table(name):
  task = envs.get_task(name)
  base = _options(common.prepare_model(task))
  got = _options(common.prepare_model(task, 'playground'))
  iterations, ls_iterations, integrator, disabled = _PLAYGROUND_XML[task.domain]
  assert got['iterations'] == iterations
  assert got['ls_iterations'] == ls_iterations
  assert got['integrator'] == int(
      getattr(mujoco.mjtIntegrator, f'mjINT_{integrator}'))
  assert got['solver'] == int(mujoco.mjtSolver.mjSOL_NEWTON)
  assert got['cone'] == int(mujoco.mjtCone.mjCONE_PYRAMIDAL)
  assert got['disableflags'] == _flags(disabled)
  changed = {k for k in base if base[k] != got[k]}
  assert changed <= _PRESET_FIELDS, changed - _PRESET_FIELDS
  # Timestep, density, gravity, ... stay dm_control's.
  assert got['timestep'] == base['timestep']


def test_playground_table_covers_every_registered_domain():
  domains = {envs.get_task(n).domain for n in envs.list_tasks()}
  assert domains == set(_PLAYGROUND_XML)


def test_unknown_preset_is_refused_listing_the_valid_ones():
  with pytest.raises(ValueError, match='dm_control, playground') as e:
    envs.make('CartpoleSwingup', num_envs=1, physics='brax')
  assert "'brax'" in str(e.value)
  assert envs.PHYSICS_PRESETS == ('dm_control', 'playground')


def test_playground_refuses_a_domain_it_has_no_settings_for():
  task = dataclasses.replace(envs.get_task('CartpoleSwingup'),
                             domain='my_robot')
  with pytest.raises(ValueError, match="no settings for domain 'my_robot'"):
    envs.make(task, num_envs=1, physics='playground')
  # The default needs no table entry.
  envs.make(task, num_envs=1)


def test_preset_reaches_the_native_physics():
  """Same reset and actions: RK4 (dm_control) and Euler (playground)
  cartpoles agree on the first observation and then drift apart."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  obs = {}
  for physics in envs.PHYSICS_PRESETS:
    env = envs.make('CartpoleSwingup', num_envs=2, physics=physics)
    state = env.reset(jax.random.key(0))
    first = np.asarray(state.obs)
    for _ in range(5):
      state, ts = env.step(state, jnp.full((2, 1), 0.5, jnp.float32))
    obs[physics] = first, np.asarray(ts.obs)
  np.testing.assert_array_equal(obs['dm_control'][0], obs['playground'][0])
  gap = np.abs(obs['dm_control'][1] - obs['playground'][1]).max()
  assert 1e-6 < gap < 0.1, gap
