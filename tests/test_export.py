"""`roxie export`, `roxie.load_policy` and the shipped policies."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from roxie import agents
from roxie import cli
from roxie import config as config_lib
from roxie import envs
from roxie import export
from roxie import run as run_lib
from roxie import types as roxie_types

TINY = {'warmup_steps': 100, 'batch_size': 32, 'hidden_sizes': (16, 16),
        'action_repeat': 2}
# A shipped policy's return, re-evaluated as its card says, must be within
# this fraction of the card's value (plus 5). It is the same program on the
# same resets, exact on the machine that exported it; elsewhere float
# differences could flip one swing-up of PendulumSwingup's 20 episodes
# (~900 -> 0, the mean moves ~45), which this still allows.
SHIPPED_RTOL = 0.06


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
  out = str(tmp_path_factory.mktemp('runs') / 'sac')
  run_lib.train('sac', 'PendulumSwingup', num_envs=2, steps=400,
                eval_every=400, eval_episodes=2, out=out, overrides=TINY,
                verbose=False, env_options={'episode_length': 50})
  return out


@pytest.fixture(scope='module')
def bundle(tiny_run, tmp_path_factory):
  folder = str(tmp_path_factory.mktemp('bundles') / 'pendulum')
  export.export_run(tiny_run, folder, eval_episodes=3)
  return folder


def _run(capsys, *argv):
  code = cli.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def test_bundle_layout_and_metadata(bundle):
  assert sorted(os.listdir(bundle)) == ['README.md', 'metrics.csv',
                                        'policy.npz', 'roxie.json']
  with open(os.path.join(bundle, 'roxie.json')) as f:
    meta = json.load(f)
  assert meta['agent'] == 'sac' and meta['task'] == 'PendulumSwingup'
  # 50 control steps, 25 decisions under the action repeat.
  assert meta['env_spec']['episode_length'] == 25
  assert meta['env_options'] == {'episode_length': 50, 'action_repeat': 2}
  assert meta['config']['hidden_sizes'] == [16, 16]
  assert meta['evaluation']['episodes'] == 3
  assert len(meta['evaluation']['returns']) == 3
  assert meta['training']['env_steps'] == 400
  with np.load(os.path.join(bundle, 'policy.npz')) as data:
    names = data.files
  # The actor's parameters and the observation statistics (SAC's default
  # standardises) only: no critic, target or optimiser state.
  assert {n.split(':')[0] for n in names} == {'actor', 'obs_stats'}
  assert meta['params']['num_parameters'] == sum(
      np.load(os.path.join(bundle, 'policy.npz'))[n].size for n in names)


def test_model_card_front_matter(bundle):
  with open(os.path.join(bundle, 'README.md')) as f:
    card = f.read()
  front = card.split('---\n')[1]
  assert card.startswith('---\n')
  assert 'library_name: roxie\n' in front
  assert '- "sac"\n' in front and '- "PendulumSwingup"\n' in front
  assert 'model-index:' in front and 'type: mean_reward' in front
  with open(os.path.join(bundle, 'roxie.json')) as f:
    ev = json.load(f)['evaluation']
  assert f'value: "{ev["return_mean"]:.2f} +/- {ev["return_std"]:.2f}"' in front


def test_loaded_policy_acts_like_the_recipe(tiny_run, bundle):
  policy = export.load_policy(bundle)
  meta, module, cfg = run_lib.load_run(tiny_run)
  spec = policy.spec
  recipe = module.make(cfg, spec)
  template = jax.eval_shape(lambda k: recipe.init(k, spec),
                            jax.random.PRNGKey(0))
  template = jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), template)
  state = run_lib.load_agent_state(
      os.path.join(tiny_run, run_lib.STATE_FILE), template)
  obs = np.random.default_rng(0).normal(size=(5, spec.obs_size))
  expected, _ = recipe.act(state, obs, jax.random.PRNGKey(0), explore=False)
  np.testing.assert_allclose(policy(obs), expected, atol=1e-6)
  np.testing.assert_allclose(policy(obs[0]), expected[0], atol=1e-6)
  assert policy(obs).shape == (5, spec.action_size)
  with pytest.raises(ValueError, match=f'expected observations '
                     f'\\[{spec.obs_size}\\]'):
    policy(np.zeros((5, spec.obs_size + 1)))
  assert meta['agent'] == policy.agent


def test_eval_of_the_bundle_matches_eval_of_the_run(tiny_run, bundle, capsys):
  code, from_run, _ = _run(capsys, 'eval', '--run', tiny_run, '--episodes',
                           '3', '--seed', '4')
  assert code == 0
  code, from_bundle, err = _run(capsys, 'eval', '--policy', bundle,
                                '--episodes', '3', '--seed', '4')
  assert code == 0, err
  assert from_bundle == from_run


def test_load_in_a_fresh_process_without_jax_at_import(bundle):
  obs = np.linspace(-1, 1, export.load_policy(bundle).spec.obs_size)
  expected = np.asarray(export.load_policy(bundle)(obs))
  code = (
      'import sys, numpy as np, roxie\n'
      'assert "jax" not in sys.modules, "import roxie imported jax"\n'
      f'p = roxie.load_policy({bundle!r})\n'
      f'print(list(np.asarray(p(np.linspace(-1, 1, {obs.size})))))\n')
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  proc = subprocess.run([sys.executable, '-c', code], capture_output=True,
                        text=True, env=env, timeout=300, check=False)
  assert proc.returncode == 0, proc.stderr
  got = np.asarray(eval(proc.stdout.strip().splitlines()[-1]))  # pylint: disable=eval-used
  np.testing.assert_allclose(got, expected, atol=1e-6)


def test_export_refuses_to_overwrite_and_reports_bad_runs(tiny_run, bundle,
                                                          tmp_path, capsys):
  code, _, err = _run(capsys, 'export', '--run', tiny_run, '--to', bundle)
  assert code == 2 and 'already exists' in err and '--overwrite' in err
  code, _, err = _run(capsys, 'export', '--run', str(tmp_path / 'nope'),
                      '--to', str(tmp_path / 'b'))
  assert code == 2 and 'not a roxie run' in err
  assert not (tmp_path / 'b').exists()


def test_bad_bundles_fail_clearly(tiny_run, bundle, tmp_path):
  with pytest.raises(export.BundleError, match='training run: export it'):
    export.load_policy(tiny_run)
  with pytest.raises(export.BundleError, match='no shipped policy'):
    export.load_policy(str(tmp_path / 'missing'))
  broken = tmp_path / 'broken'
  broken.mkdir()
  for name in ('roxie.json', 'README.md'):
    with open(os.path.join(bundle, name)) as src:
      (broken / name).write_text(src.read())
  (broken / 'policy.npz').write_bytes(b'PK\x03\x04 truncated')
  with pytest.raises(export.BundleError, match='policy.npz is unreadable'):
    export.load_policy(str(broken))
  # Parameters of another network size than the config says.
  meta = json.loads((broken / 'roxie.json').read_text())
  meta['config']['hidden_sizes'] = [32, 32]
  (broken / 'roxie.json').write_text(json.dumps(meta))
  with open(os.path.join(bundle, 'policy.npz'), 'rb') as src:
    (broken / 'policy.npz').write_bytes(src.read())
  with pytest.raises(export.BundleError, match='do not fit'):
    export.load_policy(str(broken))
  (broken / 'roxie.json').write_text('{"format": "something-else"}')
  with pytest.raises(export.BundleError, match='not a roxie policy bundle'):
    export.load_policy(str(broken))


@pytest.mark.parametrize('agent', agents.AGENTS)
def test_every_agent_exports_a_policy_matching_its_act(agent, tmp_path):
  """Each recipe's own policy (Recipe.policy) agrees with its act."""
  module = agents.get_agent(agent)
  fields = {f for f in module.Config.__dataclass_fields__}
  overrides = {k: v for k, v in dict(TINY, hidden_sizes=(8,)).items()
               if k in fields}
  cfg = config_lib.apply_overrides(module.Config(), overrides)
  spec = envs.make('PendulumSwingup', num_envs=1, nthread=1).spec
  recipe = module.make(cfg, spec)
  # The recipe carries its policy itself (export has no stand-ins).
  assert isinstance(recipe.policy, roxie_types.Policy)
  assert export.policy_hooks(agent, module, recipe, cfg,
                             spec) is recipe.policy
  state = recipe.init(jax.random.PRNGKey(3), spec)
  # A state whose outputs are not all ~0 (fresh heads start tiny), and for
  # every recipe but MPO observation statistics that are not the identity.
  state = jax.tree.map(
      lambda x: x + 0.05 * jax.random.normal(jax.random.PRNGKey(1), x.shape,
                                             x.dtype)
      if jax.numpy.issubdtype(x.dtype, jax.numpy.floating) else x, state)
  if agent != 'mpo':  # Those whose defaults standardise: all but MPO.
    from roxie import buffers  # pylint: disable=g-import-not-at-top
    state = state._replace(obs_stats=buffers.normalizer_update(
        state.obs_stats, 2. + 3. * jax.random.normal(
            jax.random.PRNGKey(2), (64, spec.obs_size))))
  run_dir = tmp_path / 'run'
  run_dir.mkdir()
  (run_dir / 'config.json').write_text(json.dumps(
      {'agent': agent, 'task': 'PendulumSwingup', 'backend': 'cpu',
       'num_envs': 1, 'steps': 0, 'seed': 0, 'env_options': {},
       'config': config_lib.to_dict(cfg)}))
  run_lib.save_agent_state(str(run_dir / run_lib.STATE_FILE), state)
  policy = export.policy_from_run(str(run_dir))  # Also checks against act.
  assert policy.agent == agent
  assert all(isinstance(v, dict) for v in policy.params.values())
  assert ('obs_stats' in policy.params) == (agent != 'mpo')
  obs = 2. + 3. * np.random.default_rng(5).normal(size=(4, spec.obs_size))
  expected, _ = recipe.act(state, obs, jax.random.PRNGKey(0), explore=False)
  got = policy(obs)
  np.testing.assert_allclose(got, expected, atol=1e-6)
  assert np.ptp(np.asarray(got)) > 1e-3  # Not a constant policy.
  # Only the policy's parameters travel (no critic or optimiser state).
  n_policy = sum(np.size(x) for x in jax.tree.leaves(policy.params))
  assert n_policy < sum(np.size(x) for x in jax.tree.leaves(state)) / 2


def _save_run(run_dir, agent, cfg, state):
  """A run folder holding `state` as `agent`'s trained state (no training)."""
  run_dir.mkdir()
  (run_dir / 'config.json').write_text(json.dumps(
      {'agent': agent, 'task': 'PendulumSwingup', 'backend': 'cpu',
       'num_envs': 1, 'steps': 0, 'seed': 0, 'env_options': {},
       'config': config_lib.to_dict(cfg)}))
  run_lib.save_agent_state(str(run_dir / run_lib.STATE_FILE), state)


def _sac_as(monkeypatch, **attrs):
  """SAC under another module (`roxie.agents.get_agent` returns it)."""
  import types  # pylint: disable=g-import-not-at-top
  sac = agents.get_agent('sac')
  module = types.ModuleType('sac')
  module.Config = sac.Config
  for name, value in attrs.items():
    setattr(module, name, value)
  monkeypatch.setattr(agents, 'get_agent', lambda name: module)
  cfg = config_lib.apply_overrides(sac.Config(), {'hidden_sizes': (8,)})
  spec = envs.make('PendulumSwingup', num_envs=1, nthread=1).spec
  return sac, cfg, spec


def test_an_agent_without_a_policy_gets_told_what_to_add(tmp_path,
                                                         monkeypatch, capsys):
  import types  # pylint: disable=g-import-not-at-top
  module = types.ModuleType('my_agent')
  module.make = lambda config, spec: None
  recipe = roxie_types.Recipe(name='my_agent', config=None, init=None,
                              act=None, update=None, on_policy=False)
  with pytest.raises(export.BundleError) as err:
    export.policy_hooks('my_agent', module, recipe, None, None)
  message = str(err.value)
  assert "'my_agent'" in message
  assert 'policy=roxie.types.Policy(params=..., apply=...)' in message
  assert 'policy_params(state)' in message
  assert 'make_policy(config, spec)' in message
  module.policy_params = lambda state: {'actor': state}
  with pytest.raises(export.BundleError, match='does not define make_policy,'):
    export.policy_hooks('my_agent', module, recipe, None, None)
  with pytest.raises(export.BundleError, match='must be a roxie.types.Policy'):
    export.policy_hooks('my_agent', module,
                        recipe._replace(policy=(len, len)), None, None)
  # Through `roxie export`: a run of such an agent fails with that message.
  sac, cfg, spec = _sac_as(monkeypatch, make=lambda config, spec: sac.make(
      config, spec)._replace(policy=None))
  state = sac.make(cfg, spec).init(jax.random.PRNGKey(0), spec)
  _save_run(tmp_path / 'run', 'sac', cfg, state)
  code, _, err = _run(capsys, 'export', '--run', str(tmp_path / 'run'),
                      '--to', str(tmp_path / 'bundle'))
  assert code == 2
  assert 'does not define policy_params and make_policy' in err, err
  assert 'Recipe(..., policy=roxie.types.Policy' in err, err
  assert not (tmp_path / 'bundle').exists()


def test_an_agent_with_only_module_hooks_still_exports(tmp_path, monkeypatch):
  """The older convention: no Recipe.policy, module-level hooks."""
  sac = agents.get_agent('sac')
  sac, cfg, spec = _sac_as(
      monkeypatch, make=lambda config, spec: sac.make(config, spec)._replace(
          policy=None),
      policy_params=sac.policy_params, make_policy=sac.make_policy)
  state = sac.make(cfg, spec).init(jax.random.PRNGKey(0), spec)
  _save_run(tmp_path / 'run', 'sac', cfg, state)
  meta = export.export_run(str(tmp_path / 'run'), str(tmp_path / 'bundle'),
                           eval_episodes=1)
  assert meta['agent'] == 'sac'
  with np.load(tmp_path / 'bundle' / 'policy.npz') as data:
    assert {n.split(':')[0] for n in data.files} == {'actor', 'obs_stats'}
  policy = export.load_policy(str(tmp_path / 'bundle'))
  obs = np.random.default_rng(0).normal(size=(3, spec.obs_size))
  expected, _ = sac.make(cfg, spec).act(state, obs, jax.random.PRNGKey(0),
                                        explore=False)
  np.testing.assert_allclose(policy(obs), expected, atol=1e-6)


def test_export_refuses_a_policy_that_disagrees_with_act(tmp_path,
                                                         monkeypatch):
  def make(config, spec):
    recipe = sac.make(config, spec)
    halved = lambda params, obs: 0.5 * recipe.policy.apply(params, obs)
    return recipe._replace(policy=recipe.policy._replace(apply=halved))

  sac = agents.get_agent('sac')
  sac, cfg, spec = _sac_as(monkeypatch, make=make)
  state = sac.make(cfg, spec).init(jax.random.PRNGKey(0), spec)
  _save_run(tmp_path / 'run', 'sac', cfg, state)
  with pytest.raises(export.BundleError,
                     match=r"act\(explore=False\) by up to .*Recipe.policy"):
    export.export_run(str(tmp_path / 'run'), str(tmp_path / 'bundle'))
  assert not (tmp_path / 'bundle').exists()
  # check_recipe refuses it before training, too.
  from roxie import loops  # pylint: disable=g-import-not-at-top
  with pytest.raises(loops.RecipeError, match='differs from act'):
    loops.check_recipe(make(cfg, spec), spec)


@pytest.mark.parametrize('name', export.shipped_policies())
def test_shipped_policy_scores_what_its_card_says(name):
  policy = export.load_policy(name)
  ev = policy.metadata['evaluation']
  assert ev['backend'] == 'cpu'
  result = export.evaluate_policy(policy, episodes=ev['episodes'],
                                  backend='cpu', seed=ev['seed'])
  expected = ev['return_mean']
  assert abs(float(result.mean) - expected) <= SHIPPED_RTOL * expected + 5, (
      f'{name}: card says {expected}, evaluation gives {float(result.mean)}')
  with open(os.path.join(export.resolve_bundle(name), 'README.md')) as f:
    assert f'{expected:.2f} +/-' in f.read()


def test_policies_are_shipped():
  assert 'CartpoleSwingup-sac' in export.shipped_policies()


def test_a_bundles_spec_keeps_the_action_repeat_and_older_ones_read_as_one():
  # EnvSpec.action_repeat (D4PG's and TD4's default support scales with it)
  # travels in a bundle's env_spec; bundles written before it existed have
  # no such key and read back as 1.
  from roxie import envs  # pylint: disable=g-import-not-at-top
  spec = envs.make('CartpoleSwingup', num_envs=1, action_repeat=8).spec
  written = json.loads(json.dumps(export._spec_to_dict(spec)))
  assert written['action_repeat'] == 8
  assert export._spec_from_dict(written) == spec  # pylint: disable=protected-access
  del written['action_repeat']
  assert export._spec_from_dict(written).action_repeat == 1  # pylint: disable=protected-access
