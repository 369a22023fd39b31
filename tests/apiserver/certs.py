"""Certificates for the stand-in, made with the openssl command line at
start: a CA, a server certificate for 127.0.0.1/localhost signed by it, and
client certificates whose subject carries the user (CN) and groups (O), the
way kube-apiserver's x509 authenticator reads them.
"""
import os
import subprocess


def _openssl(*args, cwd):
    r = subprocess.run(["openssl", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {r.stderr.strip()}")


def _subject(cn, orgs=()):
    return "/" + "/".join([f"O={o}" for o in orgs] + [f"CN={cn}"])


def make_ca(d):
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650", "-subj", "/CN=gpuop-standin-ca",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=d)
    return os.path.join(d, "ca.crt")


def make_cert(d, stem, cn, orgs=(), server=False, hosts=()):
    """Writes <stem>.crt/<stem>.key signed by ca.crt in d; returns the paths."""
    ext = os.path.join(d, stem + ".ext")
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    if server:
        lines.append("extendedKeyUsage=serverAuth")
        alts = [("IP:" if h.replace(".", "").isdigit() or ":" in h else "DNS:") + h for h in hosts]
        lines.append("subjectAltName=" + ",".join(alts))
    else:
        lines.append("extendedKeyUsage=clientAuth")
    with open(ext, "w") as f:
        f.write("\n".join(lines) + "\n")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", stem + ".key", "-out", stem + ".csr", "-subj", _subject(cn, orgs), cwd=d)
    _openssl("x509", "-req", "-in", stem + ".csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", stem + ".crt", "-days", "3650", "-extfile", ext, cwd=d)
    os.unlink(os.path.join(d, stem + ".csr"))
    os.unlink(ext)
    return os.path.join(d, stem + ".crt"), os.path.join(d, stem + ".key")


def make_all(d, hosts=("127.0.0.1", "localhost")):
    """CA, server and admin client certificates in d (created if needed)."""
    os.makedirs(d, exist_ok=True)
    ca = make_ca(d)
    server = make_cert(d, "server", "gpuop-standin", server=True, hosts=hosts)
    admin = make_cert(d, "admin", "admin", orgs=("system:masters",))
    return {"ca": ca, "server": server, "admin": admin}
