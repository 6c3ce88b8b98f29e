"""examples/crossq.py: no target network, one critic pass over the joint batch,
and the run tooling (train, checkpoint, resume, eval, export) for it."""

import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from roxie import checkpoint
from roxie import cli
from roxie import envs
from roxie import export
from roxie import loops
from roxie.types import Transition

CROSSQ = os.path.abspath(os.path.join(os.path.dirname(__file__), '..',
                                      'examples', 'crossq.py'))
N = 8


def _load():
  spec = importlib.util.spec_from_file_location('crossq_example', CROSSQ)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _setup():
  crossq = _load()
  spec = envs.make('PendulumSwingup', num_envs=1, nthread=1).spec
  config = crossq.Config(hidden_sizes=(8,), critic_hidden_sizes=(8,),
                         batch_size=N)
  recipe = crossq.make(config, spec)
  state = recipe.init(jax.random.PRNGKey(0), spec)
  # s and s' far apart, so the joint statistics differ from either half's.
  rng = np.random.default_rng(0)
  batch = Transition(
      obs=np.ones((N, spec.obs_size), np.float32),
      action=rng.uniform(-1, 1, (N, spec.action_size)).astype(np.float32),
      reward=rng.uniform(0, 1, N).astype(np.float32),
      discount=np.full(N, 0.99, np.float32),
      next_obs=np.full((N, spec.obs_size), 3., np.float32))
  return crossq, spec, config, recipe, state, batch


def _input_stats(stats):
  (name,) = [k for k in stats if k.endswith('batch_renorm_input')]
  return stats[name]


def test_crossq_has_no_target_network_and_passes_check_recipe():
  crossq, spec, _, recipe, state, _ = _setup()
  assert not any('target' in f for f in crossq.State._fields)
  # Both critics' running statistics live in the agent state.
  assert all(leaf.shape[0] == 2 for leaf in jax.tree.leaves(state.critic_stats))
  loops.check_recipe(recipe, spec)  # Includes its policy against act.


def test_update_normalises_critics_over_the_joint_batch():
  _, spec, _, recipe, state, batch = _setup()
  new, metrics = jax.jit(recipe.update)(state, batch, jax.random.PRNGKey(1))
  assert np.isfinite(float(metrics['critic_loss']))
  stats = _input_stats(new.critic_stats)
  o = spec.obs_size
  # Input statistics over [(s, a); (s', a')]: observations 1 and 3, mean 2
  # and variance 1 (the halves alone: variance 0), momentum 0.99.
  np.testing.assert_allclose(stats['mean'][:, :o], 0.01 * 2., rtol=1e-5)
  np.testing.assert_allclose(stats['var'][:, :o], 0.99 + 0.01 * 1., rtol=1e-5)
  np.testing.assert_array_equal(stats['steps'], [1, 1])
  assert int(new.steps) == 1


def test_target_half_has_no_gradient():
  crossq, spec, config, _, state, batch = _setup()
  critic = crossq.critic_network(config, spec)
  next_a = jnp.asarray(np.linspace(-0.5, 0.5, N)[:, None], jnp.float32)
  next_logp = jnp.asarray(np.linspace(-1., 1., N), jnp.float32)
  alpha = 0.2
  joint_obs = jnp.concatenate([batch.obs, batch.next_obs])
  joint_act = jnp.concatenate([batch.action, next_a])

  def loss_to(params, target):
    q = critic.apply(params, state.critic_stats, joint_obs, joint_act,
                     True)[0][:, :N]  # The (s, a) half of the joint pass.
    return 0.5 * jnp.mean(jnp.sum(jnp.square(q - target[None]), 0))

  def target_of(params):  # r + discount (min of both at (s', a') - alpha lp)
    q_next = critic.apply(params, state.critic_stats, joint_obs, joint_act,
                          True)[0][:, N:]
    return batch.reward + batch.discount * (
        jnp.min(q_next, 0) - alpha * next_logp)

  got = jax.grad(lambda p: crossq.critic_loss(
      critic, p, state.critic_stats, batch, next_a, next_logp, alpha)[0])(
          state.critic)
  # The target held fixed at its value: the gradient reaches the critics
  # through the (s, a) half (and the joint batch statistics) only.
  fixed = target_of(state.critic)
  expected = jax.grad(lambda p: loss_to(p, fixed))(state.critic)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4,
                                                       atol=1e-9),
               got, expected)
  # Letting the gradient through the target gives another one (so the
  # comparison above can fail).
  through = jax.grad(lambda p: loss_to(p, target_of(p)))(state.critic)
  assert any(not np.allclose(a, b, rtol=1e-3) for a, b in zip(
      jax.tree.leaves(got), jax.tree.leaves(through)))
  # And the loss value is the hand-built one.
  loss, (q, _) = crossq.critic_loss(critic, state.critic, state.critic_stats,
                                    batch, next_a, next_logp, alpha)
  np.testing.assert_allclose(loss, loss_to(state.critic, fixed), rtol=1e-6)
  assert q.shape == (2, N)


def _cli(capsys, *argv):
  code = cli.main([str(a) for a in argv])
  out, err = capsys.readouterr()
  return code, out, err


def test_crossq_trains_resumes_evaluates_and_exports(tmp_path, capsys):
  out = tmp_path / 'run'
  tiny = ('--task', 'CartpoleBalance', '--num-envs', '2', '--eval-every',
          '40', '--eval-episodes', '2', '--episode-length', '20',
          '--set', 'hidden_sizes=16,16', '--set', 'critic_hidden_sizes=16,16',
          '--set', 'batch_size=16', '--set', 'warmup_steps=20',
          '--set', 'replay_capacity=64', '--set', 'action_repeat=1',
          '--quiet')
  code, _, err = _cli(capsys, 'train', '--agent', f'{CROSSQ}:make',
                      '--steps', 40, '--out', out, *tiny)
  assert code == 0, err
  first = checkpoint.list_steps(str(out))
  assert first, 'no checkpoint written'
  with open(out / 'config.json') as f:
    assert json.load(f)['config']['critic_hidden_sizes'] == [16, 16]
  code, _, err = _cli(capsys, 'train', '--resume', out, '--steps', 80,
                      '--quiet')
  assert code == 0, err
  assert max(checkpoint.list_steps(str(out))) > max(first)
  code, stdout, err = _cli(capsys, 'eval', '--run', out, '--episodes', 2)
  assert code == 0 and 'eval_return=' in stdout, err
  code, _, err = _cli(capsys, 'export', '--run', out, '--to',
                      tmp_path / 'bundle', '--episodes', 2)
  assert code == 0, err
  policy = export.load_policy(str(tmp_path / 'bundle'))
  assert policy.name == 'CartpoleBalance-crossq'
  with np.load(tmp_path / 'bundle' / 'policy.npz') as data:
    assert data.files and all(n.startswith('actor:') for n in data.files)
  action = policy(np.zeros(policy.spec.obs_size, np.float32))
  assert action.shape == (policy.spec.action_size,)
