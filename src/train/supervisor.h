// The fault-tolerant supervisor (`zaya train --supervise`, spec §D.6): runs the trainer as a child process and
// restarts it from the latest good checkpoint when it crashes, is killed, or stops making progress.
//
//   heartbeat   the child reports "ready N", "step N", "ckpt N" lines on a pipe (SupervisorLink); no line for
//               `heartbeat_timeout` seconds after "ready" (at least 300 s before it: set-up sends nothing) means
//               it hangs: its process group is killed (SIGKILL) and restarted.
//   restart     with --resume (and without --from) once the run has a checkpoint; from scratch before that.
//   backoff     restart_delay · 2^(k−1) seconds before the k-th consecutive restart, at most 60 s.
//   bounded     more than `max_restarts` consecutive restarts without a new checkpoint: give up (exit 1).
//   not retried a child that fails with an error before "ready" (bad flags, bad data: restarting cannot help),
//               and a stop the supervisor itself asked for (SIGINT/SIGTERM/SIGHUP are forwarded to the child once,
//               which stops gracefully after a checkpoint).
//
// Every event is logged, with its reason, to stderr and RUN_DIR/supervisor.log; RUN_DIR/trainer.pid holds the
// current child's pid.
//
// Data parallel (`--launcher "mpirun -np 4 ..."`): the child is the launcher running zaya on every rank, and the
// whole job is restarted. A failing rank already ends the job (dist/comm.h: abort, watchdog); the supervisor sees
// the launcher exit non-zero. Heartbeats come from rank 0 through a FIFO, RUN_DIR/supervisor.fifo, named in
// ZAYA_SUPERVISOR_FIFO (launchers close inherited pipes but pass the environment to local ranks; rank 0 must run
// on the supervisor's host). A hung job gets SIGTERM (the launcher tears its ranks down), SIGKILL 10 s later; a
// stop request is passed on as SIGUSR1, which mpirun forwards to every rank (train/signals.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

struct SupervisorConfig {
    std::string run_dir;
    int64_t max_restarts = 10;
    double heartbeat_timeout = 600; // seconds
    double restart_delay = 1;       // seconds, doubled per consecutive restart
    std::vector<std::string> launcher; // e.g. {"mpirun", "-np", "4"}; empty: run the trainer directly
};

// `argv` is the trainer's command line (argv[0] first) without the supervisor's own flags. Returns zaya's exit
// status: the child's when it finished or was stopped, 1 when the supervisor gave up.
int supervise(const std::vector<std::string> &argv, const SupervisorConfig &c);

// The child's end of the heartbeat pipe (ZAYA_SUPERVISOR_FD) or FIFO (ZAYA_SUPERVISOR_FIFO); does nothing when
// not supervised or not `enabled` (data parallel: rank 0 alone reports).
class SupervisorLink {
  public:
    explicit SupervisorLink(bool enabled = true);
    void send(const std::string &line) const; // one line; a gone supervisor is ignored
    bool active() const { return fd_ >= 0; }

  private:
    int fd_ = -1;
};

} // namespace zaya
