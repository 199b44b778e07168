"""No file can run code (issue 23): crafted checkpoints and policy files whose pickle payload would
create a marker file are refused by every loader, with an error naming the file, and the marker
is never created. A control shows that each payload does create the marker when unpickled."""
from __future__ import annotations

import base64
import io
import json
import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from dynamix_hvd import checkpoint as ckpt
from dynamix_hvd import lifecycle
from dynamix_hvd.config import DynamixConfig
from dynamix_hvd.controllers import make_controller
from dynamix_hvd.controllers.finetune import FineTuner, save_policy_zip
from dynamix_hvd.controllers.policy.io import PolicyLoadError, default_policy_path, load_policy, read_policy_file
from dynamix_hvd.decide import Decider
from dynamix_hvd.plan import PlanBounds

BOUNDS = PlanBounds(max_batch=(64,) * 4)


class Payload:
    """Unpickling this runs ``touch MARKER`` (os.system): what a tampered file would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture
def marker(tmp_path):
    m = tmp_path / "PWNED"
    yield m
    assert not m.exists(), f"a loader ran the payload: {m} was created"


def _torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def test_the_payload_really_runs_code_when_unpickled(tmp_path):
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(Payload(control)))
    assert control.exists()                                   # so "never created" below means something
    control.unlink()
    torch.load(io.BytesIO(_torch_bytes({"dynamix": Payload(control)})), weights_only=False)
    assert control.exists()


# ============================================================================ checkpoints
def _check_refused(path: Path, match: str = "refused") -> None:
    with pytest.raises(ckpt.CheckpointError, match=match) as e:
        ckpt.load(path)
    assert str(path) in str(e.value)
    with pytest.raises(ckpt.CheckpointError) as e:         # the hook's loader (rank 0 reads, broadcasts)
        lifecycle.load(path, 0, lambda x: x)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("where", ["top", "nested", "model"])
def test_tampered_checkpoint_is_refused(tmp_path, marker, where):
    evil = Payload(marker)
    payload = {"top": {"dynamix": evil},
               "nested": {"dynamix": {"controller": {"anchor": [1, {"x": evil}]}}},
               "model": {"dynamix": {}, "model": {"w": torch.zeros(2)}, "optimizer": evil}}[where]
    path = tmp_path / "ck.pt"
    path.write_bytes(_torch_bytes(payload))
    _check_refused(path, match="refused: it holds pickled objects other than tensors and plain data "
                               r"\(a pickled reference to posix.system\)")


def test_finetune_weights_blob_of_an_old_checkpoint_is_refused(tmp_path, marker):
    """Format-1 fine-tuning state (base64 of a torch.save blob) inside an otherwise plain
    checkpoint: decoded at load with weights_only, a payload refused naming the checkpoint."""
    blob = base64.b64encode(_torch_bytes({"policy": Payload(marker)})).decode()
    path = tmp_path / "ft.pt"
    path.write_bytes(_torch_bytes({"dynamix": {"controller": {"finetune": {"format": 1, "weights": blob}}}}))
    _check_refused(path, match=r"fine-tuned policy weights .* posix.system")
    # and resumed directly (elastic in-memory state, not through a file): refused as well
    ctl = make_controller("ppo", BOUNDS, 32)
    with pytest.raises(PolicyLoadError, match="refused"):
        ctl.load_state_dict({"finetune": {"format": 1, "weights": blob}})


def test_old_checkpoint_needing_pickle_is_refused_with_the_reason(tmp_path):
    path = tmp_path / "old.pt"
    path.write_bytes(_torch_bytes({"dynamix": {"noise": {"s_ema": np.float64(1.0)}}}))
    _check_refused(path, match=r"numpy._core.multiarray.scalar.*older than plain-data checkpoints")


@pytest.mark.parametrize("data,why", [(b"\x00garbage", r"not a torch checkpoint \(Unsupported operand 0\)"),
                                      (b"", "empty or truncated file"),
                                      (b"PK\x03\x04cut", "not a ZIP archive")])
def test_corrupt_checkpoint_error_names_the_file_and_never_advises_unsafe_loading(tmp_path, data, why):
    """torch's weights-only failure text suggests re-running with weights_only=False (which would
    run whatever the file holds): a corrupt file's error is one line without that advice."""
    path = tmp_path / "bad.pt"
    path.write_bytes(data)
    with pytest.raises(ckpt.CheckpointError) as err:
        ckpt.load(path)
    msg = str(err.value)
    assert msg.startswith(f"checkpoint {path} is corrupt or unreadable: ") and re.search(why, msg), msg
    assert "weights_only" not in msg and "\n" not in msg, msg


def test_save_refuses_non_plain_state_naming_the_key(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match=r"\['dynamix'\]\['noise'\]\['s_ema'\] is a numpy.float64"):
        ckpt.save(tmp_path / "c.pt", {"dynamix": {"noise": {"s_ema": np.float64(1.0)}}})
    assert not (tmp_path / "c.pt").exists()


def test_finetune_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    ctl = make_controller("ppo", BOUNDS, 32, finetune=True, finetune_steps=4)
    sd = ctl.state_dict()
    ckpt.check_plain(sd)
    ckpt.save(tmp_path / "c.pt", {"dynamix": {"controller": sd}})
    back = ckpt.load(tmp_path / "c.pt")["dynamix"]["controller"]["finetune"]
    assert all(torch.equal(back["policy"][k], v) for k, v in sd["finetune"]["policy"].items())
    # a format-1 checkpoint (base64 blob, written before this change) still loads
    from dynamix_hvd.controllers.policy.io import encode_state
    old = {"format": 1, "n_updates": 0, "weights": encode_state({"policy": sd["finetune"]["policy"]})}
    ckpt.save(tmp_path / "c1.pt", {"dynamix": {"controller": {"finetune": old}}})
    up = ckpt.load(tmp_path / "c1.pt")["dynamix"]["controller"]["finetune"]
    assert "weights" not in up and all(torch.equal(up["policy"][k], v) for k, v in sd["finetune"]["policy"].items())
    make_controller("ppo", BOUNDS, 32).load_state_dict({"finetune": up})


# ============================================================================ policy files
def _zip_with(tmp_path: Path, name: str, replace: dict[str, bytes]) -> Path:
    """The shipped default policy zip with some members replaced."""
    out = tmp_path / name
    with zipfile.ZipFile(default_policy_path()) as src, zipfile.ZipFile(out, "w") as dst:
        for item in src.namelist():
            dst.writestr(item, replace.get(item, src.read(item)))
        for item in set(replace) - set(src.namelist()):
            dst.writestr(item, replace[item])
    return out


def _data_with(field: str, value) -> bytes:
    """The default zip's ``data`` with ``field`` set to ``value`` and moved first (SB3's loader
    decodes the fields in file order)."""
    with zipfile.ZipFile(default_policy_path()) as z:
        data = json.loads(z.read("data"))
    data.pop(field, None)
    return json.dumps({field: value, **data}).encode()


def _crafted(tmp_path: Path, marker: Path) -> dict[str, Path]:
    evil = pickle.dumps(Payload(marker))
    files = {"raw_pickle": tmp_path / "raw.zip"}
    files["raw_pickle"].write_bytes(evil)
    files["weights"] = _zip_with(tmp_path, "w.zip", {"policy.pth": _torch_bytes({"w": Payload(marker)})})
    files["optimizer"] = _zip_with(tmp_path, "o.zip", {"policy.optimizer.pth": _torch_bytes(Payload(marker))})
    files["data_pickled"] = _zip_with(tmp_path, "d.zip", {"data": evil})
    files["data_field"] = _zip_with(tmp_path, "f.zip", {"data": _data_with(
        "clip_range", {":type:": "<class 'function'>", ":serialized:": base64.b64encode(evil).decode()})})
    files["policy_class"] = _zip_with(tmp_path, "p.zip", {"data": _data_with(
        "policy_class", {":type:": "<class 'abc.ABCMeta'>", ":serialized:": base64.b64encode(evil).decode(),
                         "__module__": "dynamix_hvd.agent.policy"})})
    foreign = pickle.dumps(torch.nn.Module)        # a class reference, as SB3 stores policy_class
    files["foreign_class"] = _zip_with(tmp_path, "c.zip", {"data": _data_with(
        "policy_class", {":type:": "<class 'abc.ABCMeta'>", ":serialized:": base64.b64encode(foreign).decode(),
                         "__module__": "torch.nn.modules.module"})})
    files["extra_member"] = _zip_with(tmp_path, "x.zip", {"payload.pkl": evil})
    import warnings
    from stable_baselines3 import PPO
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PPO("MlpPolicy", "CartPole-v1", device="cpu", n_steps=8, batch_size=8).save(tmp_path / "mlp.zip")
    files["sb3_mlp"] = tmp_path / "mlp.zip"        # a real SB3 zip of another policy class
    return files


KINDS = ["raw_pickle", "weights", "optimizer", "data_pickled", "data_field", "policy_class", "foreign_class",
         "extra_member", "sb3_mlp"]


@pytest.mark.parametrize("kind", KINDS)
def test_crafted_policy_file_is_refused_by_every_loader(tmp_path, marker, kind):
    path = _crafted(tmp_path, marker)[kind]
    loaders = {
        "load_policy": lambda: load_policy(path),
        "ppo controller": lambda: make_controller("ppo", BOUNDS, 32, policy=str(path)),
        "fine-tuning": lambda: make_controller("ppo", BOUNDS, 32, policy=str(path), finetune=True, finetune_steps=4),
        "FineTuner": lambda: FineTuner(path, 4, steps=4),
        "save_policy_zip": lambda: save_policy_zip(path, {}, tmp_path / "out.zip"),
    }
    for name, load in loaders.items():
        with pytest.raises(PolicyLoadError) as e:
            load()
        assert str(path) in str(e.value), (name, str(e.value))
    # in a job: the fallback controller, named in the event log with the file
    events = []
    cfg = DynamixConfig(controller="ppo", controller_kwargs={"policy": str(path)}).validate()
    with pytest.warns(RuntimeWarning, match="fallback controller 'proportional'"):
        d = Decider(cfg, BOUNDS, 128, log_event=events.append)
    assert d.controller.name == "proportional"
    assert events[0]["fallback"]["to"] == "proportional" and str(path) in events[0]["fallback"]["reason"]


def test_refusals_say_why(tmp_path, marker):
    f = _crafted(tmp_path, marker)
    why = {"raw_pickle": "not a stable-baselines3 zip",
           "weights": r"policy.pth holds pickled objects other than tensors and plain data \(a pickled reference to posix.system\)",
           "optimizer": r"policy.optimizer.pth holds pickled objects .*posix.system",
           "data_pickled": "its 'data' member is not JSON",
           "data_field": r"data field 'clip_range' holds a pickle naming posix.system",
           "policy_class": r"data field 'policy_class' holds a pickle naming posix.system",
           "foreign_class": r"torch.nn.modules.module.Module",
           "extra_member": r"unexpected members \['payload.pkl'\]",
           "sb3_mlp": r"holds a stable_baselines3.common.policies.ActorCriticPolicy policy, not a DYNAMIX"}
    for kind, pattern in why.items():
        with pytest.raises(PolicyLoadError, match=pattern):
            read_policy_file(f[kind])


def test_shipped_policies_load_through_the_safe_path():
    root = default_policy_path().parent
    zips = sorted(root.rglob("*.zip"))
    assert default_policy_path() in zips and len(zips) >= 7
    for z in zips:
        pf = read_policy_file(z)
        assert pf.weights and pf.policy_kwargs["dynamix_config"]


def test_safe_loader_matches_sb3_on_the_shipped_policy():
    """Same logits and values as stable-baselines3's own (unpickling) loader on the shipped file,
    which is trusted: it is the project's own package data."""
    from stable_baselines3 import PPO
    from dynamix_hvd.controllers.policy.net import SharedRowPolicy
    ref = PPO.load(default_policy_path(), device="cpu",      # the file names the class's old module path
                   custom_objects={"learning_rate": 0.0, "lr_schedule": lambda _: 0.0,
                                   "policy_class": SharedRowPolicy}).policy
    pol, _ = load_policy(None)
    x = np.random.default_rng(0).normal(size=(6, pol.mlp_extractor.n_features - 1)).astype(np.float32)
    for a, b in zip(ref.mlp_extractor.actor_logits_numpy(x), pol.mlp_extractor.actor_logits_numpy(x)):
        assert np.array_equal(a, b)
    obs = torch.as_tensor(np.c_[np.ones((64, 1)), np.random.default_rng(1).normal(size=(64, x.shape[1]))],
                          dtype=torch.float32).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(ref.predict_values(obs), pol.predict_values(obs))


def test_fine_tuned_zip_written_here_loads_through_the_safe_path(tmp_path):
    ctl = make_controller("ppo", BOUNDS, 32, finetune=True, finetune_steps=4)
    out = ctl.save_policy(tmp_path / "ft.zip")
    pol, cfg = load_policy(out)
    assert cfg and all(torch.equal(pol.state_dict()[k], v) for k, v in ctl.finetuner.acting.state_dict().items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft.zip"]          # written via a temporary name
    shutil.copy(out, tmp_path / "copy.zip")
    FineTuner(tmp_path / "copy.zip", 4, steps=4)


def test_config_record_in_a_checkpoint_is_made_plain():
    """The job's configuration is stored as a record: a Path or numpy value a user passed in
    controller_kwargs becomes plain data instead of failing the save."""
    from dynamix_hvd.config import DynamixConfig
    d = ckpt.to_plain(DynamixConfig(controller="ppo", max_batch=(64, 64), controller_kwargs={
        "policy": Path("/x/p.zip"), "scale": np.float64(2.0)}).to_dict())
    ckpt.check_plain(d)
    assert d["controller_kwargs"] == {"policy": "/x/p.zip", "scale": 2.0} and d["max_batch"] == [64, 64]
