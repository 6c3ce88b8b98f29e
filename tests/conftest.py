"""Test-wide settings: strict broadcasting, fast compiles, a compile cache."""

import os

os.environ.setdefault('MUJOCO_GL', 'egl')
os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
# Compiles dominate the suite's time on 2 cores, and most programs here are
# never cached (a native-backend program holds host callbacks, which JAX's
# persistent cache skips). LLVM at -O0 compiles them ~20% faster in all (62
# tests of test_resume.py and agents/test_off_policy.py: 195 s -> 158 s); the
# tests check behaviour, not speed, and the subprocesses they start (the
# CLI's runs) inherit the setting. An XLA_FLAGS that names a level wins.
if '--xla_backend_optimization_level' not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                             ' --xla_backend_optimization_level=0').strip()

import hypothesis  # pylint: disable=g-import-not-at-top
import jax  # pylint: disable=g-import-not-at-top
import pytest  # pylint: disable=g-import-not-at-top

# A silent broadcast is a bug in a loss; make it fail loudly.
jax.config.update('jax_numpy_rank_promotion', 'raise')
# Compiles dominate test time on 2 cores; reuse them across runs.
jax.config.update('jax_compilation_cache_dir',
                  os.environ.get('ROXIE_JAX_CACHE',
                                 os.path.join(os.path.dirname(__file__), '..',
                                              '.jax_cache')))
jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.5)
# Property tests draw the same examples on every run and machine, so a
# failure in CI reproduces locally; a failure also prints the blob that
# replays it (@reproduce_failure). `pytest --hypothesis-profile=explore`
# draws fresh examples instead.
hypothesis.settings.register_profile('roxie', derandomize=True,
                                     print_blob=True)
hypothesis.settings.register_profile('explore', print_blob=True)
hypothesis.settings.load_profile('roxie')


@pytest.fixture(scope='session')
def gl_backend():
  """The headless OpenGL backend that renders here; skips where none works."""
  from roxie import gl  # pylint: disable=g-import-not-at-top
  try:
    return gl.gl_backend()
  except gl.RenderingUnavailable as e:
    pytest.skip(f'no headless OpenGL here: {e}')
