# Test fixture of labfleet.vllm: run a command (an ansible-playbook run) and kill it, with its whole
# process group, with SIGKILL as soon as a line of its output matches PATTERN: what a crash, an OOM
# kill or a lost controller does. Prints the output's tail; exits 1 when the pattern never showed.
#
#   python3 interrupt.py PATTERN COMMAND [ARG...]
import os
import re
import signal
import subprocess
import sys


def main():
    pattern = re.compile(sys.argv[1])
    proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    lines = []
    killed = False
    for line in proc.stdout:
        lines.append(line)
        if pattern.search(line):
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
    proc.wait()
    sys.stdout.write(''.join(lines[-40:]))
    print('interrupt.py: %s (exit status %s)' % ('killed at: ' + lines[-1].strip() if killed else 'pattern never seen',
                                                 proc.returncode))
    return 0 if killed else 1


if __name__ == '__main__':
    sys.exit(main())
