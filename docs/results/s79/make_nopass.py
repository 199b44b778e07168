"""A diagnostic copy of a pass-head policy file whose pass head never fires (its bias lowered by 20): what the
draw does without its pass. Usage: python docs/results/s79/make_nopass.py SRC.zip DST.zip"""
import io
import sys
import zipfile

import torch

src, dst = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w") as zo:
    for it in zi.infolist():
        b = zi.read(it.filename)
        if it.filename == "policy.pth":
            sd = torch.load(io.BytesIO(b), weights_only=True)
            sd["mlp_extractor.pass_pi.bias"] = sd["mlp_extractor.pass_pi.bias"] - 20.0
            buf = io.BytesIO()
            torch.save(sd, buf)
            b = buf.getvalue()
        zo.writestr(it, b)
