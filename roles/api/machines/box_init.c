/* The init of a box (README.md §Init): pid 1 of the box's pid namespace, or a child
 * subreaper in plain mode. Started by the box's cloned child with execveat() from a sealed
 * memfd, already inside the box's namespaces and as the box's user.
 *
 *   cocoonbox-init <report-fd> <agent program path> <agent argv0> [agent args...]
 *
 * It forks the agent, forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to it,
 * reaps every orphan, and exits with the agent's status once the agent is gone (128 + the
 * signal number if it was killed). As pid 1 its exit makes the kernel kill what is left of
 * the box; in plain mode it kills its remaining descendants itself.
 *
 * It is a separate, tiny, statically linked program rather than a forked copy of the api:
 * a forked api would keep the api's whole memory image (and its secrets) alive in every box.
 */
#define _GNU_SOURCE
#include "init_protocol.h"

#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

extern char** environ;

static const int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

static void report(int fd, int32_t step, int err) {
  struct cb_box_report r;
  memset(&r, 0, sizeof r);
  r.step = step;
  r.err = err;
  /* One write of 12 bytes to a pipe is atomic; nothing useful can be done if it fails. */
  ssize_t n = write(fd, &r, sizeof r);
  (void)n;
}

static int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

/* Plain mode only: SIGKILL every direct child (orphans were reparented to us, the
 * subreaper) and reap, until none is left. */
static void kill_descendants(void) {
  pid_t self = getpid();
  for (int round = 0; round < 1000; ++round) {
    DIR* proc = opendir("/proc");
    if (proc != NULL) {
      struct dirent* e;
      while ((e = readdir(proc)) != NULL) {
        char path[64];
        char buf[512];
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = '\0';
        char* close_paren = strrchr(buf, ')');
        if (close_paren == NULL) continue;
        char state;
        int ppid;
        if (sscanf(close_paren + 1, " %c %d", &state, &ppid) != 2) continue;
        if (ppid == self) kill(atoi(e->d_name), SIGKILL);
      }
      closedir(proc);
    }
    int status;
    pid_t w = waitpid(-1, &status, 0);
    if (w < 0 && errno == ECHILD) return;
  }
}

int main(int argc, char** argv) {
  if (argc < 4) return 111;
  int report_fd = atoi(argv[1]);
  int pid1 = getpid() == 1;

  /* Exec'd from a memfd, the kernel named us after "/dev/fd/N"; say what we are in ps. */
  prctl(PR_SET_NAME, "cocoonbox-init", 0, 0, 0);
  if (!pid1) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  sigset_t watched;
  sigset_t old;
  sigemptyset(&watched);
  sigaddset(&watched, SIGCHLD);
  for (size_t i = 0; i < sizeof kForwarded / sizeof kForwarded[0]; ++i) {
    sigaddset(&watched, kForwarded[i]);
  }
  /* Blocked and read from a signalfd: no handlers, so nothing runs asynchronously. */
  if (sigprocmask(SIG_BLOCK, &watched, &old) != 0) {
    report(report_fd, CB_STEP_INIT_SETUP, errno);
    return 111;
  }
  int sfd = signalfd(-1, &watched, SFD_CLOEXEC);
  if (sfd < 0 || fcntl(report_fd, F_SETFD, FD_CLOEXEC) != 0) {
    report(report_fd, CB_STEP_INIT_SETUP, errno);
    return 111;
  }

  pid_t agent = fork();
  if (agent < 0) {
    report(report_fd, CB_STEP_INIT_FORK, errno);
    return 111;
  }
  if (agent == 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    execve(argv[2], argv + 3, environ);
    report(report_fd, CB_STEP_EXEC_AGENT, errno);
    _exit(127);
  }
  close(report_fd);

  for (;;) {
    struct signalfd_siginfo si;
    ssize_t n = read(sfd, &si, sizeof si);
    if (n != (ssize_t)sizeof si) {
      if (n < 0 && errno == EINTR) continue;
      return 111;
    }
    if (si.ssi_signo != SIGCHLD) {
      kill(agent, (int)si.ssi_signo);
      continue;
    }
    for (;;) {
      int status;
      pid_t w = waitpid(-1, &status, WNOHANG);
      if (w <= 0) break;
      if (w == agent) {
        if (!pid1) kill_descendants();
        return exit_code(status);
      }
    }
  }
}
