"""Writes tests/fixtures/minimized/<writer>/<fixture>/config.json: each tiny fixture's config (and
all-MiniLM-L6-v2's) with the fields a transformers version leaves out when it saves the model.

  pip install transformers==4.57.6 && python scripts/make_minimized_configs.py 4.57
  pip install transformers==4.49.0 && python scripts/make_minimized_configs.py 4.49
  pip install transformers          && python scripts/make_minimized_configs.py strict

`4.57` / `4.49`: exactly what that version's save_pretrained writes (`to_json_string(use_diff=True)`):
4.50-4.57 drop the token ids and other base fields equal to a nested config's class defaults, 4.32-4.49
drop every nested field equal to its default. `strict`: every field equal to its (sub-)config class's
default dropped, at every level: a hand-minimized config. No torch is needed: only the config classes.

Remote-code configs (GTE's NewConfig, JinaBertConfig, ...) are skipped unless their code is given:
  REMOTE_CODE=jinaai/jina-bert-implementation=/path/to/its/files python scripts/make_minimized_configs.py 4.49
(several as `repo=dir,repo=dir`); the class named in auto_map["AutoConfig"] is imported from that folder. Such code
may need transformers 4 (JinaBERT's and NomicBERT's do): their `strict` configs come from 4.49 with the remote
class, and a transformers 5 run rewrites them as plain BertConfig diffs, which is wrong for them.
The weights stay the fixtures' own; crates/models/tests/suite/minimized_configs.rs checks that Aleph computes
the same outputs from these configs as from the full ones.
"""
import glob
import json
import os
import sys

import transformers
from transformers import AutoConfig

try:
    from transformers import PreTrainedConfig as BaseConfig
except ImportError:  # transformers 4.x
    from transformers import PretrainedConfig as BaseConfig

transformers.logging.set_verbosity_error()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def strict(cfg):
    return json.dumps(strict_dict(cfg), indent=2, sort_keys=True, default=str)


def strict_dict(cfg):
    d, defaults, out = cfg.to_dict(), cfg.__class__().to_dict(), {}
    for k, v in d.items():
        sub = getattr(cfg, k, None)
        if isinstance(sub, BaseConfig):
            out[k] = strict_dict(sub)
        elif k == "model_type" or (k == "architectures" and v is not None):
            out[k] = v
        elif k.startswith("_") or k == "transformers_version":
            continue
        elif k not in defaults or json.dumps(defaults[k], sort_keys=True, default=str) != json.dumps(
            v, sort_keys=True, default=str
        ):
            out[k] = v
    return out


def remote_config_class(folder):
    """The config class the fixture's auto_map names, from a folder given in REMOTE_CODE; None otherwise."""
    import importlib.util

    target = json.load(open(os.path.join(folder, "config.json"))).get("auto_map", {}).get("AutoConfig")
    code = dict(kv.split("=", 1) for kv in os.environ.get("REMOTE_CODE", "").split(",") if "=" in kv)
    if not target or target.split("--")[0] not in code:
        return None
    module, cls = target.split("--")[1].rsplit(".", 1)
    spec = importlib.util.spec_from_file_location(module, os.path.join(code[target.split("--")[0]], module + ".py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return getattr(m, cls)


def main():
    writer = sys.argv[1]
    configs = sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/tiny/*/config.json")))
    minilm = os.path.join(ROOT, "models/all-MiniLM-L6-v2/config.json")
    if os.path.exists(minilm):
        configs.append(minilm)
    for path in configs:
        folder = os.path.dirname(path)
        name = "models-all-MiniLM-L6-v2" if "/models/" in path else os.path.basename(folder)
        try:
            remote = remote_config_class(folder)
            cfg = remote.from_pretrained(folder) if remote else AutoConfig.from_pretrained(folder)
        except Exception as e:  # a family this version does not know (ColQwen2 before 4.50)
            print(f"{name}: skipped ({e.__class__.__name__})")
            continue
        text = strict(cfg) if writer == "strict" else cfg.to_json_string(use_diff=True)
        out = os.path.join(ROOT, "tests/fixtures/minimized", writer, name)
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "config.json"), "w") as f:
            f.write(text)
        print(name, "written")


if __name__ == "__main__":
    main()
