# The course grader in a Linux container, for instructors whose machine has no
# bubblewrap (macOS, Windows). Build it from the repository's root:
#   docker build -f exercises/grader.Dockerfile -t tc-grader .
# and grade a class in your course folder (see the README, "For instructors"):
#   docker run --rm --cap-add SYS_ADMIN --cap-add NET_ADMIN \
#     --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#     --security-opt systempaths=unconfined -v "$PWD/course:/course" -w /course \
#     tc-grader python -m transformer_course.grading.gradebook ch01 --course /course \
#     --db sqlite:////course/gradebook.db --csv ch01.csv
# bubblewrap makes new namespaces inside the container, which Docker's default
# seccomp and AppArmor profiles refuse; as root it needs SYS_ADMIN for them,
# NET_ADMIN for the sandbox's loopback, and an unmasked /proc for its own. The
# grader runs as root there and gives each submission an unprivileged user of
# its own (setpriv, from util-linux). --course and --db name the folder as the
# container sees it (nbgrader_config.py holds the host's paths).
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap util-linux \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/transformer-course
COPY requirements.txt pyproject.toml README.md ./
COPY src ./src
# what `make` installs: requirements.txt (torch pinned, and this package);
# torch's CPU build first, from PyTorch's own index (PyPI's Linux wheel pulls
# several GB of CUDA packages), which the pin then accepts
RUN pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu \
        torch==2.13.0 \
    && pip install --no-cache-dir -r requirements.txt

# nbgrader calls its tools (alembic) by name: they are on PATH in this image
WORKDIR /course
CMD ["python", "-m", "transformer_course.grading.gradebook", "--help"]
