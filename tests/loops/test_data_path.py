"""What reaches an update: the compiled loop's data path, checked row by row.

A deterministic toy environment whose every number can be recomputed: the
observation is [x, t / L], the action a moves x by 0.1 * a (x' = x + 0.1 a),
the reward is x' - 0.3 a, an episode terminates when x' > 1 and truncates
after L steps, and resets draw x uniformly in [0.3, 0.9]. A spy recipe acts
with a fixed function of the observation, a = pi(obs), and its `update`
stores what it was handed in the agent state, so the test can read the
batch (off-policy) or the rollout (on-policy) an update really received and
recompute each row from the environment's rules: the action is the one
taken at that observation, the next observation follows from it (n steps
later for n-step replay, cut at an episode's end), a truncated row
bootstraps from the observation the step reached rather than the reset one,
and rewards and discounts are the folded ones.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import loops
from roxie.types import (EnvSpec, EnvState, Recipe, ReplaySpec, Rollout,
                         TimeStep, Transition)

LENGTH = 6  # L: steps before a truncation.


@dataclasses.dataclass(frozen=True)
class Toy:
  """The integrator described in the module docstring."""
  num_envs: int = 4
  length: int = LENGTH

  @property
  def spec(self):
    return EnvSpec(task='Toy', obs_size=2, action_size=1,
                   obs_names=(('x', 1), ('t', 1)), control_timestep=0.1,
                   episode_length=self.length)

  def _start(self, key):
    x = jax.random.uniform(key, (self.num_envs,), minval=0.3, maxval=0.9)
    return jnp.stack([x, jnp.zeros_like(x)], -1)

  def reset(self, key):
    key, k = jax.random.split(key)
    return EnvState(obs=self._start(k),
                    t=jnp.zeros((self.num_envs,), jnp.int32),
                    task_state=jnp.zeros((self.num_envs, 0)), key=key,
                    physics=())

  def step(self, state, action):
    a = action[:, 0]
    x = state.obs[:, 0] + 0.1 * a
    t = state.t + 1
    terminated = x > 1.
    truncated = jnp.logical_and(t >= self.length, ~terminated)
    final_obs = jnp.stack([x, t.astype(jnp.float32) / self.length], -1)
    done = jnp.logical_or(terminated, truncated)
    key, k = jax.random.split(state.key)
    obs = jnp.where(done[:, None], self._start(k), final_obs)
    ts = TimeStep(obs=obs, reward=x - 0.3 * a, terminated=terminated,
                  truncated=truncated, final_obs=final_obs, info={})
    return EnvState(obs=obs, t=jnp.where(done, 0, t),
                    task_state=state.task_state, key=key,
                    physics=state.physics), ts


def policy(obs):
  """[..., 2] -> [..., 1]: a fixed action in [0, 1] that varies with obs."""
  return 0.5 + 0.5 * jnp.sin(17. * obs[..., :1] + 5. * obs[..., 1:2])


def _np_policy(x, t_frac):
  return float(np.asarray(policy(jnp.asarray([[x, t_frac]], jnp.float32)))[0,
                                                                            0])


def _spy(example, last_obs_shape=(4, 2), **kw):
  """A recipe acting with `policy` whose update keeps the data it got."""

  def init(key, spec):
    del key, spec
    return {'data': example, 'previous_last_obs': jnp.zeros(last_obs_shape),
            'updates': jnp.zeros((), jnp.int32)}

  def act(state, obs, key, *, explore=True):
    del state, key, explore
    return policy(obs), {'acted_x': obs[..., 0]}

  def update(state, data, key):
    del key
    # On-policy: also keep where the previous rollout ended.
    previous = (state['data'].last_obs if isinstance(data, Rollout)
                else state['previous_last_obs'])
    return ({'data': data, 'previous_last_obs': previous,
             'updates': state['updates'] + 1}, {})

  return Recipe(name='spy', config=None, init=init, act=act, update=update,
                **kw)


def _expected_transition(obs, n, gamma):
  """Replays n steps of the toy from `obs` under `policy`, as replay folds."""
  x, t = float(obs[0]), int(round(float(obs[1]) * LENGTH))
  reward, scale = 0., 1.
  action = _np_policy(x, t / LENGTH)
  first_action = action
  for _ in range(n):
    x = np.float32(x + np.float32(0.1) * np.float32(action))
    t += 1
    reward += scale * (x - 0.3 * action)
    if x > 1.:
      return first_action, reward, 0., None
    scale *= gamma
    if t >= LENGTH:  # Truncated: bootstrap from the state reached.
      return first_action, reward, scale, (x, t / LENGTH)
    action = _np_policy(x, t / LENGTH)
  return first_action, reward, scale, (x, t / LENGTH)


@pytest.mark.parametrize('n_step', [1, 3])
def test_off_policy_batches_follow_the_environment(n_step):
  env, gamma, batch_size = Toy(num_envs=4), 0.9, 64
  example = Transition(obs=jnp.zeros((batch_size, 2)),
                       action=jnp.zeros((batch_size, 1)),
                       reward=jnp.zeros((batch_size,)),
                       discount=jnp.zeros((batch_size,)),
                       next_obs=jnp.zeros((batch_size, 2)))
  recipe = _spy(example, on_policy=False, replay=ReplaySpec(
      capacity=256, batch_size=batch_size, n_step=n_step, discount=gamma),
                steps_per_iteration=4, updates_per_iteration=2,
                warmup_steps=0)
  init, run = loops.make_compiled_loop(recipe, env, iterations=8)
  state, _ = run(init(jax.random.PRNGKey(0)))
  assert int(state.agent['updates']) > 0
  batch = jax.tree.map(np.asarray, state.agent['data'])
  kinds = {'terminal': 0, 'truncated': 0, 'inner': 0}
  for i in range(batch_size):
    action, reward, discount, next_obs = _expected_transition(
        batch.obs[i], n_step, gamma)
    row = f'row {i}: {jax.tree.map(lambda x: x[i], batch)}'
    # The action stored is the one taken at the stored observation.
    np.testing.assert_allclose(batch.action[i, 0], action, atol=1e-5,
                               err_msg=row)
    np.testing.assert_allclose(batch.reward[i], reward, atol=1e-4,
                               err_msg=row)
    np.testing.assert_allclose(batch.discount[i], discount, atol=1e-5,
                               err_msg=row)
    if next_obs is None:
      kinds['terminal'] += 1
      continue
    # A truncated window bootstraps from the state it reached (t / L = 1),
    # never from a reset observation (t = 0).
    kinds['truncated' if next_obs[1] == 1. else 'inner'] += 1
    np.testing.assert_allclose(batch.next_obs[i], next_obs, atol=1e-4,
                               err_msg=row)
  # The batch exercised every kind of row.
  assert min(kinds.values()) > 0, kinds


def test_on_policy_rollouts_follow_the_environment():
  env, length = Toy(num_envs=4), 5
  b = env.num_envs
  example = Rollout(
      obs=jnp.zeros((length, b, 2)), action=jnp.zeros((length, b, 1)),
      reward=jnp.zeros((length, b)),
      terminated=jnp.zeros((length, b), bool),
      truncated=jnp.zeros((length, b), bool),
      final_obs=jnp.zeros((length, b, 2)),
      extras={'acted_x': jnp.zeros((length, b))},
      last_obs=jnp.zeros((b, 2)))
  recipe = _spy(example, on_policy=True, rollout_length=length)
  init, run = loops.make_compiled_loop(recipe, env, iterations=3)
  state, _ = run(init(jax.random.PRNGKey(0)))
  assert int(state.agent['updates']) == 3
  r = jax.tree.map(np.asarray, state.agent['data'])
  # Consecutive rollouts join: this one starts where the previous ended.
  np.testing.assert_array_equal(r.obs[0], state.agent['previous_last_obs'])
  np.testing.assert_array_equal(r.extras['acted_x'], r.obs[..., 0])
  np.testing.assert_allclose(r.action, np.asarray(policy(r.obs)), atol=1e-6)
  x_next = r.obs[..., 0] + 0.1 * r.action[..., 0]
  np.testing.assert_allclose(r.final_obs[..., 0], x_next, atol=1e-6)
  np.testing.assert_allclose(r.reward, x_next - 0.3 * r.action[..., 0],
                             atol=1e-6)
  np.testing.assert_array_equal(r.terminated, r.final_obs[..., 0] > 1.)
  np.testing.assert_array_equal(
      r.truncated, (r.final_obs[..., 1] == 1.) & ~r.terminated)
  ended = r.terminated | r.truncated
  following = np.concatenate([r.obs[1:], r.last_obs[None]], 0)
  # Within an episode the next observation acted on is the one reached;
  # after an end it is a fresh start (t = 0), and the reached one survives
  # only in final_obs.
  np.testing.assert_array_equal(following[~ended], r.final_obs[~ended])
  assert np.all(following[ended][:, 1] == 0.)
  np.testing.assert_allclose(following[..., 1][~ended],
                             r.obs[..., 1][~ended] + 1. / LENGTH, atol=1e-6)
  assert ended.any() and (~ended).any()


@pytest.mark.parametrize('backend', ['cpu', 'mjx'])
def test_on_policy_rollouts_follow_a_real_backend(backend):
  # The same joins on real physics (PendulumSwingup never terminates):
  # actions are taken at the stored observations, the observation acted on
  # next is the one reached except after the truncation every env reaches
  # every 4th step, where final_obs keeps the reached one and the next
  # observation is a fresh reset.
  from roxie import envs  # pylint: disable=g-import-not-at-top
  b, length, episode = 2, 6, 4
  env = envs.make('PendulumSwingup', backend=backend, num_envs=b,
                  episode_length=episode)
  o = env.spec.obs_size
  example = Rollout(
      obs=jnp.zeros((length, b, o)), action=jnp.zeros((length, b, 1)),
      reward=jnp.zeros((length, b)),
      terminated=jnp.zeros((length, b), bool),
      truncated=jnp.zeros((length, b), bool),
      final_obs=jnp.zeros((length, b, o)),
      extras={'acted_x': jnp.zeros((length, b))},
      last_obs=jnp.zeros((b, o)))
  recipe = _spy(example, last_obs_shape=(b, o), on_policy=True,
                rollout_length=length)
  init, run = loops.make_compiled_loop(recipe, env, iterations=2)
  state, _ = run(init(jax.random.PRNGKey(0)))
  r = jax.tree.map(np.asarray, state.agent['data'])
  np.testing.assert_array_equal(r.obs[0], state.agent['previous_last_obs'])
  np.testing.assert_array_equal(r.extras['acted_x'], r.obs[..., 0])
  np.testing.assert_allclose(r.action, np.asarray(policy(r.obs)), atol=1e-6)
  assert not r.terminated.any()
  # Steps 6..11 (0-based) of the run: steps 7 and 11 end the second and
  # third episodes (indices 1 and 5 here).
  expected = np.zeros((length, b), bool)
  expected[[1, 5]] = True
  np.testing.assert_array_equal(r.truncated, expected)
  following = np.concatenate([r.obs[1:], r.last_obs[None]], 0)
  np.testing.assert_array_equal(following[~expected], r.final_obs[~expected])
  assert not np.allclose(following[expected], r.final_obs[expected])


def test_off_policy_batches_from_the_native_backend_hold_the_acted_on_obs():
  # Replay rows from real physics: each stored action is the policy's at
  # the stored observation (a collector that stored the observation the
  # step reached instead would fail this), and a 1-step row bootstraps from
  # a different observation than the one acted on.
  from roxie import envs  # pylint: disable=g-import-not-at-top
  env = envs.make('PendulumSwingup', num_envs=2, episode_length=5)
  o, batch_size = env.spec.obs_size, 32
  example = Transition(obs=jnp.zeros((batch_size, o)),
                       action=jnp.zeros((batch_size, 1)),
                       reward=jnp.zeros((batch_size,)),
                       discount=jnp.zeros((batch_size,)),
                       next_obs=jnp.zeros((batch_size, o)))
  recipe = _spy(example, last_obs_shape=(2, o), on_policy=False,
                replay=ReplaySpec(capacity=128, batch_size=batch_size,
                                  n_step=1, discount=0.9),
                steps_per_iteration=2, updates_per_iteration=1,
                warmup_steps=0)
  init, run = loops.make_compiled_loop(recipe, env, iterations=12)
  state, _ = run(init(jax.random.PRNGKey(0)))
  batch = jax.tree.map(np.asarray, state.agent['data'])
  np.testing.assert_allclose(batch.action, np.asarray(policy(batch.obs)),
                             atol=1e-6)
  assert not np.any(np.all(np.isclose(batch.obs, batch.next_obs), axis=-1))
  np.testing.assert_allclose(batch.discount, 0.9)  # Pendulum never ends.
