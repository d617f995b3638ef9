// A block's CUDA threads as OS threads (ThreadSanitizer builds) or as fibers on the launching thread (threads.h).
#include "threads.h"

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#if !ZAYA_EMU_OS_THREADS
#include <sys/mman.h>
#include <unistd.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#endif

namespace emu {

#if ZAYA_EMU_OS_THREADS

Barrier::Barrier(std::ptrdiff_t count, std::function<void()> on_completion)
    : on_completion_(std::move(on_completion)), barrier_(count, Completion{this}) {}
void Barrier::arrive_and_wait() { barrier_.arrive_and_wait(); }
void Barrier::arrive_and_drop() { barrier_.arrive_and_drop(); }

void run_threads(unsigned n, const std::function<void(unsigned)> &worker, const std::function<void(unsigned)> &) {
    std::vector<std::thread> threads;
    threads.reserve(n);
    for (unsigned t = 0; t < n; ++t) threads.emplace_back([&worker, t] { worker(t); });
    for (auto &t : threads) t.join();
}

#else

namespace {

// ASan follows the stack switches (its fake stacks for use-after-return, its view of where the stack is).
#if defined(__SANITIZE_ADDRESS__)
void start_switch(void **fake_stack, const void *bottom, size_t size) {
    __sanitizer_start_switch_fiber(fake_stack, bottom, size);
}
void finish_switch(void *fake_stack, const void **bottom, size_t *size) {
    __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
}
void unpoison(void *p, size_t n) { __asan_unpoison_memory_region(p, n); }
#else
void start_switch(void **, const void *, size_t) {}
void finish_switch(void *, const void **, size_t *) {}
void unpoison(void *, size_t) {}
#endif

// Stacks: ASan's redzones make a kernel's frame several times its size; the pages are touched only as used.
constexpr size_t kStackBytes = size_t(1) << 20;

// Stacks are mapped once, with an inaccessible guard page below each (an overflow faults instead of corrupting the
// next), and reused by later launches.
std::vector<std::byte *> free_stacks;
std::byte *take_stack() {
    if (!free_stacks.empty()) {
        std::byte *s = free_stacks.back();
        free_stacks.pop_back();
        unpoison(s, kStackBytes); // the frames a finished fiber left poisoned
        return s;
    }
    const size_t guard = size_t(sysconf(_SC_PAGESIZE));
    void *m = mmap(nullptr, kStackBytes + guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        std::perror("emu: mmap of a fiber stack");
        std::abort();
    }
    mprotect(m, guard, PROT_NONE);
    return static_cast<std::byte *>(m) + guard;
}

// Switching stacks. On x86-64, six callee-saved registers pushed, the stack pointer swapped, and popped: glibc's
// swapcontext also saves the signal mask, a system call per switch that cost more than the kernels it switched
// between. Elsewhere, ucontext.
#if defined(__x86_64__)
extern "C" void zaya_emu_switch(void **save_sp, void *load_sp);
asm(R"(
    .text
    .globl zaya_emu_switch
    .type zaya_emu_switch, @function
zaya_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size zaya_emu_switch, .-zaya_emu_switch
)");
struct Context {
    void *sp = nullptr;
};
void switch_context(Context &save, Context &load) { zaya_emu_switch(&save.sp, load.sp); }
// A fresh context that enters entry() on the stack [stack, stack + bytes): zaya_emu_switch pops six zeros into the
// registers and returns to entry, with the stack aligned as after a call (entry never returns).
void make_context(Context &c, std::byte *stack, size_t bytes, void (*entry)()) {
    auto *top = reinterpret_cast<uintptr_t *>(reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t(15));
    top[-1] = 0;                                  // entry's return address
    top[-2] = reinterpret_cast<uintptr_t>(entry); // zaya_emu_switch's
    for (int i = 3; i <= 8; ++i) top[-i] = 0;    // r15 … rbp
    c.sp = top - 8;
}
#else
struct Context {
    ucontext_t uc;
};
void switch_context(Context &save, Context &load) { swapcontext(&save.uc, &load.uc); }
void make_context(Context &c, std::byte *stack, size_t bytes, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = bytes;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

struct Fiber {
    Context context;
    std::byte *stack = nullptr;
    void *fake_stack = nullptr; // ASan's, while switched off
    bool done = false;
};

// The launch whose fibers are running (a kernel launches nothing, so there is at most one).
struct Run {
    Context launcher;
    const void *launcher_bottom = nullptr;
    size_t launcher_size = 0;
    void *launcher_fake_stack = nullptr;
    std::vector<Fiber> fibers;
    unsigned running = 0;
    const std::function<void(unsigned)> *worker = nullptr;
    bool progress = false; // since the last round: an arrival at a barrier, or a thread that returned
};
Run *run = nullptr;

void fiber_main() {
    Run &r = *run;
    const unsigned t = r.running;
    finish_switch(nullptr, &r.launcher_bottom, &r.launcher_size);
    (*r.worker)(t);
    r.fibers[t].done = true;
    r.progress = true;
    start_switch(nullptr, r.launcher_bottom, r.launcher_size); // null: this fiber's fake stack goes with it
    Context finished;
    switch_context(finished, r.launcher); // never resumed
    std::abort();
}

// From a fiber waiting at a barrier: back to the launcher, which resumes the next fiber.
void yield() {
    Run &r = *run;
    Fiber &f = r.fibers[r.running];
    start_switch(&f.fake_stack, r.launcher_bottom, r.launcher_size);
    switch_context(f.context, r.launcher);
    finish_switch(f.fake_stack, &r.launcher_bottom, &r.launcher_size);
}

} // namespace

Barrier::Barrier(std::ptrdiff_t count, std::function<void()> on_completion)
    : on_completion_(std::move(on_completion)), expected_(count) {}

void Barrier::complete() {
    arrived_ = 0;
    ++phase_;
    if (on_completion_) on_completion_();
}

void Barrier::arrive_and_wait() {
    run->progress = true;
    const uint64_t phase = phase_;
    if (++arrived_ == expected_) return complete();
    while (phase_ == phase) yield();
}

void Barrier::arrive_and_drop() {
    run->progress = true;
    if (arrived_ == --expected_) complete();
}

void run_threads(unsigned n, const std::function<void(unsigned)> &worker,
                 const std::function<void(unsigned)> &switch_state) {
    if (run) {
        std::fprintf(stderr, "emu: a launch from inside a kernel\n");
        std::abort();
    }
    Run r;
    r.worker = &worker;
    r.fibers.resize(n);
    for (Fiber &f : r.fibers) {
        f.stack = take_stack();
        make_context(f.context, f.stack, kStackBytes, fiber_main);
    }
    run = &r;
    // Round robin: each fiber runs until it waits at a barrier (or returns); the barrier's last arrival releases the
    // others, which go on at their next turn.
    for (unsigned alive = n; alive > 0;) {
        r.progress = false;
        for (unsigned t = 0; t < n; ++t) {
            Fiber &f = r.fibers[t];
            if (f.done) continue;
            r.running = t;
            switch_state(t);
            start_switch(&r.launcher_fake_stack, f.stack, kStackBytes);
            switch_context(r.launcher, f.context);
            finish_switch(r.launcher_fake_stack, nullptr, nullptr);
            switch_state(t);
            alive -= f.done;
        }
        if (alive > 0 && !r.progress) {
            std::fprintf(stderr, "emu: deadlock: each of the block's %u running threads waits at a barrier the others "
                                 "never reach (a __syncthreads or warp collective behind a branch some threads "
                                 "skip; a hang on the GPU)\n",
                         alive);
            std::abort();
        }
    }
    run = nullptr;
    for (Fiber &f : r.fibers) free_stacks.push_back(f.stack);
}

#endif

} // namespace emu
