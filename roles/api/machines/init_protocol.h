#pragma once
/* The failure report of a box's start sequence, shared by local_child.cc (C++) and
 * box_init.c (C). Whoever fails writes one record to the report pipe and exits; the api
 * reads the pipe until end of file, which it sees once every holder has exec'd the agent
 * (the pipe is close-on-exec there), so EOF without a record means the agent runs.
 * The one record that is not a failure, CB_STEP_USERNS_READY, asks the api for the user
 * namespace's id maps.
 * See README.md §Start sequence. */

#include <stdint.h>

struct cb_box_report {
  int32_t step;  /* CB_STEP_* */
  int32_t err;   /* errno */
  int32_t index; /* the mount op for CB_STEP_MOUNT_OP, else 0 */
};

enum {
  /* The cloned child, before it execs the init. */
  CB_STEP_SETSID = 1,
  CB_STEP_CGROUP = 2,
  CB_STEP_MOUNT_PRIVATE = 3,
  CB_STEP_ROOT_TMPFS = 4,
  CB_STEP_MOUNT_OP = 5,
  CB_STEP_HOSTNAME = 6,
  CB_STEP_PIVOT_ROOT = 7,
  CB_STEP_STDIO = 8,
  CB_STEP_SETGROUPS = 9,
  CB_STEP_SETGID = 10,
  CB_STEP_SETUID = 11,
  CB_STEP_NO_NEW_PRIVS = 12,
  CB_STEP_CHDIR = 13,
  CB_STEP_EXEC_INIT = 14,
  CB_STEP_USERNS = 15,      /* unshare(CLONE_NEWUSER) */
  CB_STEP_USERNS_WAIT = 16, /* waiting for the api to write the id maps */
  /* Not a failure: the child is in its user namespace and waits for its id maps (err 0).
   * The api writes them, answers on the go pipe and reads on. */
  CB_STEP_USERNS_READY = 17,
  /* The init. */
  CB_STEP_INIT_SETUP = 20,
  CB_STEP_INIT_FORK = 21,
  CB_STEP_EXEC_AGENT = 22,
};
