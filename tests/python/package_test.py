"""`pip install ./python` builds and installs an importable gossip_sgd (offline: setuptools from
Debian, no build isolation, no dependencies fetched). Installs a copy of python/ into a temporary
directory, so the source tree gets no build artefacts."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


class PackageTest(unittest.TestCase):
    def test_pip_install_gives_an_importable_package(self):
        with tempfile.TemporaryDirectory(prefix="gossip_pkg_") as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                       "__pycache__"))
            target = os.path.join(tmp, "site")
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                            "--no-build-isolation", "--no-index", "--target", target, src],
                           check=True, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                                            "PIP_ROOT_USER_ACTION": "ignore"})
            out = subprocess.run(
                [sys.executable, "-c",
                 "import gossip_sgd, gossip_sgd.protocol as p; "
                 "print(gossip_sgd.__file__, p.VERSION, gossip_sgd.GossipTimeout.__mro__[1].__name__)"],
                check=True, capture_output=True, text=True, cwd=tmp,
                env={**os.environ, "PYTHONPATH": target}).stdout.split()
            self.assertTrue(out[0].startswith(target), out)
            self.assertEqual(out[1:], [str(3), "GossipError"])


if __name__ == "__main__":
    unittest.main()
