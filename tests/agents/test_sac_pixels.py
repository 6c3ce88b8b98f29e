"""SAC, DDPG, TD3, D4PG and TD4 from pixels (dict observations): DrQ/SAC-AE.

A synthetic pure-JAX pixel environment stands in for rendered tasks: a point
on a line whose position is drawn as a bright column of a 16x16 image,
stacked 2 frames deep as roxie's pixel environments stack them.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from roxie import config as config_lib
from roxie import loops
from roxie import networks
from roxie.agents import sac
from roxie.types import EnvSpec, EnvState, TimeStep, Transition

H = W = 16
S = 2
SHAPES = (('pixels', (H, W, 3 * S), 'uint8'), ('state', (2,), 'float32'))
SPEC = EnvSpec(task='PixelPoint', obs_size=2, action_size=1,
               obs_names=(('x', 2),), control_timestep=0.1, episode_length=8,
               obs_shapes=SHAPES, frame_stack=S)
CFG = sac.Config(hidden_sizes=(16, 16), batch_size=8,
                 pixels=networks.PixelConfig(encoder_channels=(4, 4),
                                             encoder_strides=(2, 2),
                                             encoder_feature_size=8),
                 replay_capacity=400, warmup_steps=16,
                 updates_per_iteration=1)


def _frame(x):
  """[B] positions in [-1, 1] -> [B, H, W, 3] uint8, a bright column at x."""
  col = jnp.clip(jnp.round((x + 1.) / 2. * (W - 1)), 0, W - 1)
  image = (jnp.arange(W)[None, :] == col[:, None]).astype(jnp.uint8) * 255
  return jnp.broadcast_to(image[:, None, :, None], (x.shape[0], H, W, 3))


@dataclasses.dataclass(frozen=True)
class PixelPoint:
  """x' = x + 0.25 a, reward -|x'|, time limit `length`; resets to x = 0.8."""
  num_envs: int = 2
  length: int = 8

  @property
  def spec(self):
    return SPEC._replace(episode_length=self.length)

  def _obs(self, stack, x):
    return {'pixels': stack, 'state': jnp.stack([x, jnp.zeros_like(x)], -1)}

  def reset(self, key):
    x = jnp.full((self.num_envs,), 0.8)
    stack = jnp.concatenate([_frame(x)] * S, -1)
    return EnvState(obs=self._obs(stack, x), t=jnp.zeros(self.num_envs,
                                                         jnp.int32),
                    task_state=jnp.zeros((self.num_envs, 0)), key=key,
                    physics=x)

  def step(self, state, action):
    x = jnp.clip(state.physics + 0.25 * action[:, 0], -1., 1.)
    t = state.t + 1
    truncated = t >= self.length
    final = self._obs(
        jnp.concatenate([state.obs['pixels'][..., 3:], _frame(x)], -1), x)
    reset = self.reset(state.key)
    pick = lambda a, b: jnp.where(
        jnp.reshape(truncated, truncated.shape + (1,) * (a.ndim - 1)), a, b)
    obs = jax.tree.map(pick, reset.obs, final)
    x_next = jnp.where(truncated, reset.physics, x)
    ts = TimeStep(obs=obs, reward=-jnp.abs(x),
                  terminated=jnp.zeros_like(truncated), truncated=truncated,
                  final_obs=final, info={})
    return state._replace(obs=obs, t=jnp.where(truncated, 0, t),
                          physics=x_next), ts


def _batch(key, n=8):
  k = jax.random.split(key, 5)
  obs = lambda kk: {
      'pixels': jax.random.randint(kk, (n, H, W, 3 * S), 0, 256).astype(
          jnp.uint8),
      'state': jax.random.normal(kk, (n, 2))}
  return Transition(obs=obs(k[0]),
                    action=jax.random.uniform(k[1], (n, 1), minval=-1,
                                              maxval=1),
                    reward=jax.random.normal(k[2], (n,)),
                    discount=jnp.full((n,), 0.99), next_obs=obs(k[3]))


def test_pixel_sac_state_act_and_exported_policy_agree():
  recipe = sac.make(CFG, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  assert set(state.critic) == {'encoder', 'q'}
  # The actor holds no conv: it reads the critic's encoder features.
  assert not any('conv' in k for k in state.actor)
  obs = _batch(jax.random.PRNGKey(1)).obs
  a, _ = recipe.act(state, obs, jax.random.PRNGKey(2), explore=True)
  assert a.shape == (8, 1) and np.all(np.abs(a) <= 1.)
  mode, _ = recipe.act(state, obs, jax.random.PRNGKey(3), explore=False)
  policy = sac.make_policy(CFG, SPEC)
  np.testing.assert_allclose(policy(sac.policy_params(state), obs), mode,
                             rtol=1e-5, atol=1e-6)


def test_normalize_observations_standardises_the_state_entry_only():
  cfg = dataclasses.replace(CFG, normalize_observations=True)
  recipe = sac.make(cfg, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  assert set(state.obs_stats) == {'state'}  # no statistics of the images
  batch = _batch(jax.random.PRNGKey(1))
  batch = batch._replace(obs=dict(batch.obs,
                                  state=100. * batch.obs['state'] + 5.))
  new, metrics = jax.jit(recipe.update)(state, batch, jax.random.PRNGKey(2))
  assert all(np.isfinite(float(v)) for v in metrics.values())
  stats = new.obs_stats['state']
  np.testing.assert_allclose(stats.mean + stats.mean_lo,
                             np.mean(batch.obs['state'], 0), rtol=1e-5)
  mode, _ = recipe.act(new, batch.obs, jax.random.PRNGKey(3), explore=False)
  params = sac.policy_params(new)
  assert set(params) == {'actor', 'encoder', 'obs_stats'}
  np.testing.assert_allclose(sac.make_policy(cfg, SPEC)(params, batch.obs),
                             mode, rtol=1e-5, atol=1e-6)


def test_pixel_update_trains_the_encoder_by_the_critic_loss_only():
  recipe = sac.make(CFG, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  batch = _batch(jax.random.PRNGKey(1))
  new, metrics = jax.jit(recipe.update)(state, batch, jax.random.PRNGKey(2))
  assert all(np.isfinite(float(v)) for v in metrics.values())
  moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))),
                       state.critic['encoder'], new.critic['encoder'])
  assert max(jax.tree.leaves(moved)) > 0.  # The critic loss moves it.
  # The encoder's gradient is the critic loss's alone: the actor loss sends
  # none (stop-gradient). Check by differentiating the actor's use of it.
  feats = lambda enc: jax.lax.stop_gradient(
      sac._encoder(CFG, SPEC).apply(enc, batch.obs))
  grad = jax.grad(lambda enc: jnp.sum(feats(enc)))(state.critic['encoder'])
  assert all(float(jnp.max(jnp.abs(g))) == 0. for g in jax.tree.leaves(grad))
  # Target encoder: Polyak with encoder_tau, the Q-heads with tau.
  leaf = lambda p: jax.tree.leaves(p)[0]
  np.testing.assert_allclose(
      leaf(new.target_critic['encoder']),
      (1 - CFG.pixels.encoder_tau) * leaf(state.target_critic['encoder'])
      + CFG.pixels.encoder_tau * leaf(new.critic['encoder']), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(
      leaf(new.target_critic['q']),
      (1 - CFG.tau) * leaf(state.target_critic['q'])
      + CFG.tau * leaf(new.critic['q']), rtol=1e-5, atol=1e-7)
  # Without augmentation the critic fits a fixed batch.
  recipe = sac.make(config_lib.apply_overrides(CFG, dict(augment_pad=0)), SPEC)
  update = jax.jit(recipe.update)
  new, metrics = update(state, batch, jax.random.PRNGKey(2))
  first = float(metrics['critic_loss'])
  for i in range(60):
    new, metrics = update(new, batch, jax.random.PRNGKey(9 + i))
  assert float(metrics['critic_loss']) < first


@pytest.mark.slow  # ~40 s; MPO's twin (test_mpo_pixels.py) stays fast.
def test_augmentation_is_a_config_switch():
  batch = _batch(jax.random.PRNGKey(1))
  outs = []
  for pad in (0, 4):
    cfg = config_lib.apply_overrides(CFG, dict(augment_pad=pad))
    recipe = sac.make(cfg, SPEC)
    state = recipe.init(jax.random.PRNGKey(0), SPEC)
    new, _ = recipe.update(state, batch, jax.random.PRNGKey(2))
    outs.append(jax.tree.leaves(new.critic['encoder'])[0])
  assert not np.allclose(outs[0], outs[1])


def test_pixel_recipe_refuses_another_observation_layout():
  recipe = sac.make(CFG, SPEC)
  other = SPEC._replace(obs_shapes=(('pixels', (H, W, 3), 'uint8'),
                                    ('state', (2,), 'float32')), frame_stack=1)
  with pytest.raises(ValueError, match=r'built for observations pixels'):
    recipe.init(jax.random.PRNGKey(0), other)
  with pytest.raises(ValueError, match='flat observations'):
    recipe.init(jax.random.PRNGKey(0), SPEC._replace(obs_shapes=None))


# ~47 s; SAC from pixels through the compiled loop and a run's evaluation
# stay fast in test_pixels_train.py.
@pytest.mark.slow
def test_pixel_sac_runs_in_the_compiled_loop_and_the_evaluator():
  env = PixelPoint(num_envs=2)
  recipe = sac.make(CFG, env.spec)
  init, run = loops.make_compiled_loop(recipe, env, iterations=20)
  state = init(jax.random.PRNGKey(0))
  # The replay keeps one frame per row (3 channels, not 3 * S).
  assert state.replay.obs.obs['pixels'].shape == (200, 2, H, W, 3)
  for _ in range(2):
    state, out = run(state)
  assert int(out.updates) > 0
  assert all(np.isfinite(float(v)) for v in out.metrics.values())
  assert int(state.agent.steps) > 0
  result = loops.make_evaluator(recipe, PixelPoint(num_envs=3))(
      state.agent, jax.random.PRNGKey(1))
  assert result.returns.shape == (3,) and np.all(np.isfinite(result.returns))


# -- the other recipes through networks.encoded_critic -------------------------


# One compile of the update and one of the loop each (~45-65 s on 2 cores):
# the fast suite runs TD4 (the distributional critic and the policy delay);
# DDPG, TD3 and D4PG take the same helper and are slow.
@pytest.mark.parametrize('name', [
    pytest.param('ddpg', marks=pytest.mark.slow),
    pytest.param('td3', marks=pytest.mark.slow),
    pytest.param('d4pg', marks=pytest.mark.slow), 'td4'])
def test_dpg_recipes_train_from_pixels_through_the_shared_helper(name):
  from roxie.agents import get_agent  # pylint: disable=g-import-not-at-top
  module = get_agent(name)
  # Raw observations, as `--obs pixels` sets (PIXEL_DEFAULTS; the skeleton's
  # Config standardises by default).
  cfg = config_lib.apply_overrides(module.Config(), dict(
      hidden_sizes=(16, 16), batch_size=8,
      encoder_channels=(4, 4), encoder_strides=(2, 2), encoder_feature_size=8,
      replay_capacity=400, warmup_steps=16,
      updates_per_iteration=1, normalize_observations=False))
  recipe = module.make(cfg, SPEC)
  state = recipe.init(jax.random.PRNGKey(0), SPEC)
  assert set(state.critic) == {'encoder', 'q'}
  assert not any('conv' in k for k in state.actor)
  batch = _batch(jax.random.PRNGKey(1))
  new, metrics = jax.jit(recipe.update)(state, batch, jax.random.PRNGKey(2))
  assert all(np.isfinite(float(v)) for v in metrics.values())
  moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))),
                       state.critic['encoder'], new.critic['encoder'])
  assert max(jax.tree.leaves(moved)) > 0.
  # Exported policy == act(explore=False).
  mode, _ = recipe.act(new, batch.obs, jax.random.PRNGKey(3), explore=False)
  policy = module.make_policy(cfg, SPEC)
  params = module.policy_params(new)
  assert set(params) == {'actor', 'encoder'}
  np.testing.assert_allclose(policy(params, batch.obs), mode, rtol=1e-5,
                             atol=1e-6)
  # Through the compiled loop.
  env = PixelPoint(num_envs=2)
  init, run = loops.make_compiled_loop(recipe, env, iterations=20)
  loop_state, out = run(init(jax.random.PRNGKey(0)))
  loop_state, out = run(loop_state)
  assert int(out.updates) > 0
  assert all(np.isfinite(float(v)) for v in out.metrics.values())
