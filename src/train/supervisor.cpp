#include "train/supervisor.h"

#include "core/error.h"
#include "train/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace zaya {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr double kSetupTimeout = 300; // seconds a trainer may take from start to "ready"
volatile std::sig_atomic_t g_stop = 0;
void on_stop(int sig) { g_stop = sig; }

class Log {
  public:
    explicit Log(const std::string &run_dir) : path_((fs::path(run_dir) / "supervisor.log").string()) {}
    template <typename... A> void operator()(fmt::format_string<A...> f, A &&...a) const {
        const std::time_t now = std::time(nullptr);
        char stamp[32];
        std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
        const std::string line = fmt::format("[supervisor {}] {}\n", stamp, fmt::format(f, std::forward<A>(a)...));
        std::fputs(line.c_str(), stderr);
        std::fflush(stderr);
        std::ofstream(path_, std::ios::app) << line;
    }

  private:
    std::string path_;
};

int64_t latest_checkpoint_step(const std::string &run_dir) {
    const auto all = checkpoint_list(run_dir);
    for (const auto &d : all)
        if (fs::exists(fs::path(d) / "manifest.json")) return std::stoll(fs::path(d).filename().string().substr(5));
    return -1;
}

// The restart command: --resume from the run's checkpoints when there are any (never --from: it names a
// checkpoint older than the run's own), otherwise the original command without --resume (a fresh start).
std::vector<std::string> restart_argv(const std::vector<std::string> &argv, bool have_checkpoint) {
    std::vector<std::string> out;
    for (size_t i = 0; i < argv.size(); ++i) {
        const std::string &a = argv[i];
        if (a == "--from") {
            ++i;
            continue;
        }
        if (a.rfind("--from=", 0) == 0 || a == "--resume") continue;
        out.push_back(a);
    }
    if (have_checkpoint) out.push_back("--resume");
    return out;
}

std::string describe(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return fmt::format("was killed by {}", strsignal(WTERMSIG(status)));
    return "stopped";
}

std::string join(const std::vector<std::string> &v) {
    std::string s;
    for (const auto &a : v) s += (s.empty() ? "" : " ") + a;
    return s;
}

// Sleeps `seconds` unless a stop signal arrives first.
void interruptible_sleep(double seconds) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (!g_stop && Clock::now() < until) ::poll(nullptr, 0, 50);
}

} // namespace

int supervise(const std::vector<std::string> &argv, const SupervisorConfig &c) {
    std::error_code ec;
    fs::create_directories(c.run_dir, ec);
    if (ec) fail("cannot create run directory '{}': {}", c.run_dir, ec.message());
    const Log log(c.run_dir);
    struct sigaction sa {};
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    int64_t best = latest_checkpoint_step(c.run_dir);
    int64_t consecutive = 0, restarts = 0;
    log("supervising: {} (heartbeat timeout {} s, at most {} restarts in a row without a new checkpoint)", join(argv),
        c.heartbeat_timeout, c.max_restarts);
    for (int attempt = 0;; ++attempt) {
        std::vector<std::string> args = attempt == 0 ? argv : restart_argv(argv, best >= 0);
        const bool launched = !c.launcher.empty();
        int fds[2];
        if (!launched && ::pipe2(fds, O_CLOEXEC) != 0) fail("supervisor: pipe: {}", std::strerror(errno));
        const std::string fifo = (fs::path(c.run_dir) / "supervisor.fifo").string();
        if (launched) { // a fresh FIFO per attempt; opened read-write so that it never reports end of file
            ::unlink(fifo.c_str());
            if (::mkfifo(fifo.c_str(), 0600) != 0)
                fail("supervisor: cannot create '{}': {}", fifo, std::strerror(errno));
            fds[0] = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
            fds[1] = -1;
            if (fds[0] < 0) fail("supervisor: cannot open '{}': {}", fifo, std::strerror(errno));
            char self[4096];
            const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
            if (n <= 0) fail("supervisor: cannot find its own executable: {}", std::strerror(errno));
            args[0] = std::string(self, size_t(n)); // the launcher runs this same zaya on every rank
            args.insert(args.begin(), c.launcher.begin(), c.launcher.end());
        }
        const pid_t parent = ::getpid();
        const pid_t pid = ::fork();
        if (pid < 0) fail("supervisor: fork: {}", std::strerror(errno));
        if (pid == 0) { // child: own process group (signals reach it through the supervisor only), dies with us
            ::setpgid(0, 0);
            ::prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (::getppid() != parent) ::_exit(1);
            if (launched) {
                ::setenv("ZAYA_SUPERVISOR_FIFO", fifo.c_str(), 1);
            } else {
                ::close(fds[0]);
                ::fcntl(fds[1], F_SETFD, 0);
                ::setenv("ZAYA_SUPERVISOR_FD", std::to_string(fds[1]).c_str(), 1);
            }
            if (attempt > 0) // an injected fault (trainer.h) happens once per supervised run, not once per restart
                for (const char *v : {"ZAYA_FAULT_NAN_GRAD", "ZAYA_FAULT_SPIKE_GRAD", "ZAYA_FAULT_HANG"}) ::unsetenv(v);
            std::vector<char *> cargv;
            for (const auto &a : args) cargv.push_back(const_cast<char *>(a.c_str()));
            cargv.push_back(nullptr);
            if (launched) ::execvp(cargv[0], cargv.data());
            else ::execv("/proc/self/exe", cargv.data());
            std::fprintf(stderr, "supervisor: cannot run the trainer: %s\n", std::strerror(errno));
            ::_exit(127);
        }
        ::setpgid(pid, pid);
        if (!launched) ::close(fds[1]);
        std::ofstream((fs::path(c.run_dir) / "trainer.pid").string(), std::ios::trunc) << pid << "\n";
        log("trainer started (pid {}, attempt {}): {}", pid, attempt + 1, join(args));

        bool ready = false, hung = false;
        int forwarded = 0, status = 0;
        int64_t last_step = -1;
        std::string pending;
        auto last_beat = Clock::now(), killed_at = last_beat;
        for (;;) {
            pollfd p{fds[0], POLLIN, 0};
            if (::poll(&p, 1, 200) > 0) {
                char buf[4096];
                const ssize_t n = ::read(fds[0], buf, sizeof buf);
                if (n > 0) {
                    pending.append(buf, size_t(n));
                    for (size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
                        const std::string line = pending.substr(0, nl);
                        last_beat = Clock::now();
                        const auto sp = line.find(' ');
                        const std::string kind = line.substr(0, sp);
                        const int64_t v = sp == std::string::npos ? -1 : std::atoll(line.c_str() + sp + 1);
                        if (kind == "ready") ready = true, last_step = v;
                        else if (kind == "step") last_step = v;
                    }
                }
            }
            if (g_stop && !forwarded) {
                forwarded = g_stop;
                log("received {}: asking the trainer to checkpoint and stop", strsignal(forwarded));
                // mpirun kills its job on SIGTERM but forwards SIGUSR1 to every rank, a graceful stop there too.
                ::kill(pid, launched ? SIGUSR1 : forwarded);
            }
            const pid_t w = ::waitpid(pid, &status, WNOHANG);
            if (w == pid) break;
            // Set-up (measuring the machine, loading a large checkpoint) sends nothing: it gets a longer limit.
            const double quiet = std::chrono::duration<double>(Clock::now() - last_beat).count();
            const double limit = ready ? c.heartbeat_timeout : std::max(c.heartbeat_timeout, kSetupTimeout);
            if (!hung && quiet > limit) {
                log("no heartbeat from the trainer for {:.0f} s ({}): killing it", quiet,
                    ready ? fmt::format("last step {}", last_step) : std::string("still setting up"));
                // A launcher's ranks are in process groups of their own: it must tear them down itself.
                ::kill(launched ? pid : -pid, launched ? SIGTERM : SIGKILL);
                hung = true;
                killed_at = Clock::now();
            }
            if (hung && launched && std::chrono::duration<double>(Clock::now() - killed_at).count() > 10) {
                ::kill(-pid, SIGKILL);
                killed_at = Clock::now();
            }
        }
        ::close(fds[0]);
        if (launched) ::unlink(fifo.c_str());

        if (forwarded) {
            log("trainer {} after the stop request", describe(status));
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + forwarded;
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            log("trainer finished (step {}); {} restart(s) in this run", last_step, restarts);
            return 0;
        }
        if (!ready && WIFEXITED(status) && !hung) {
            log("trainer {} during set-up; not restarting (see its error above)", describe(status));
            return WEXITSTATUS(status);
        }
        const int64_t now_best = latest_checkpoint_step(c.run_dir);
        if (now_best > best) consecutive = 0;
        best = std::max(best, now_best);
        ++consecutive;
        if (consecutive > c.max_restarts) {
            log("trainer {}; giving up after {} restarts in a row without a new checkpoint", describe(status),
                consecutive - 1);
            return 1;
        }
        const double delay = std::min(60.0, c.restart_delay * std::pow(2.0, double(consecutive - 1)));
        log("trainer {}{} at step {}; restarting {} in {:.1f} s (restart {})", describe(status),
            hung ? " (hung)" : "", last_step,
            best >= 0 ? fmt::format("from checkpoint step {}", best) : std::string("from scratch"), delay,
            restarts + 1);
        interruptible_sleep(delay);
        if (g_stop) {
            log("received {} while waiting to restart: stopping", strsignal(g_stop));
            return 128 + g_stop;
        }
        ++restarts;
    }
}

SupervisorLink::SupervisorLink(bool enabled) {
    if (!enabled) return;
    if (const char *path = std::getenv("ZAYA_SUPERVISOR_FIFO")) {
        // Non-blocking: with no supervisor reading (a stale FIFO) the open fails and the run goes on unsupervised.
        fd_ = ::open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd_ >= 0) std::signal(SIGPIPE, SIG_IGN);
        return;
    }
    const char *v = std::getenv("ZAYA_SUPERVISOR_FD");
    if (!v) return;
    fd_ = std::atoi(v);
    if (::fcntl(fd_, F_GETFD) < 0) {
        fd_ = -1;
        return;
    }
    ::fcntl(fd_, F_SETFD, FD_CLOEXEC);
    std::signal(SIGPIPE, SIG_IGN); // a gone supervisor must not kill the trainer
}

void SupervisorLink::send(const std::string &line) const {
    if (fd_ < 0) return;
    const std::string l = line + "\n";
    [[maybe_unused]] ssize_t n = ::write(fd_, l.data(), l.size()); // ≤ PIPE_BUF: atomic; errors ignored
}

} // namespace zaya
