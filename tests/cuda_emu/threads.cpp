// A block's CUDA threads as fibers on the launching thread (threads.h), annotated for ASan and TSan.
#include "threads.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
// TSan's dynamic annotations (its runtime has them; no header declares them).
extern "C" void AnnotateIgnoreReadsBegin(const char *file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char *file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char *file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char *file, int line);
#endif

namespace emu {

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

// TSan: a context per fiber, switched without ordering them (`no_sync`: only barriers order CUDA threads), and
// release/acquire on a barrier's address for the order it gives.
#if defined(__SANITIZE_THREAD__)
void *tsan_current() { return __tsan_get_current_fiber(); }
void *tsan_create() { return __tsan_create_fiber(0); }
void tsan_switch(void *f) { __tsan_switch_to_fiber(f, __tsan_switch_to_fiber_no_sync); }
#else
void *tsan_current() { return nullptr; }
void *tsan_create() { return nullptr; }
void tsan_switch(void *) {}
#endif

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
// Not instrumented: it runs after TSan was told of the switch, as the fiber switched to, which has no order with
// what the contexts were written by.
__attribute__((no_sanitize("thread"))) void switch_context(Context &save, Context &load) {
    zaya_emu_switch(&save.sp, load.sp);
}
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
__attribute__((no_sanitize("thread"))) void switch_context(Context &save, Context &load) {
    swapcontext(&save.uc, &load.uc);
}
void make_context(Context &c, std::byte *stack, size_t bytes, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = bytes;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

// Stacks: the sanitizers make a kernel's frame several times its size; the pages are touched only as used.
constexpr size_t kStackBytes = size_t(1) << 20;

// A fiber's stack and TSan context, made once and reused by later runs on its pool (TSan slows down with every
// context it has seen). Thread t of a run takes its pool's slot t, so a context and its stack go together: the
// stack's reuse is in the context's program order. The stack has an inaccessible guard page below it: an overflow
// faults instead of corrupting the next.
struct Slot {
    std::byte *stack;
    void *tsan;
};
std::vector<Slot> pools[kPools];
Slot take_slot(unsigned pool, unsigned t) {
    std::vector<Slot> &slots = pools[pool];
    if (t < slots.size()) {
        Slot s = slots[t];
        unpoison(s.stack, kStackBytes); // the frames a finished fiber left poisoned
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
    slots.push_back({static_cast<std::byte *>(m) + guard, tsan_create()});
    return slots.back();
}

struct Fiber {
    Context context;
    std::byte *stack = nullptr;
    void *fake_stack = nullptr; // ASan's, while switched off
    void *tsan = nullptr;       // TSan's context
    bool done = false;
};

// The launch whose fibers are running (a kernel launches nothing, so there is at most one).
struct Run {
    Context launcher;
    const void *launcher_bottom = nullptr;
    size_t launcher_size = 0;
    void *launcher_fake_stack = nullptr;
    void *launcher_tsan = nullptr;
    std::vector<Fiber> fibers;
    unsigned running = 0;
    const std::function<void(unsigned)> *worker = nullptr;
    bool progress = false; // since the last round: an arrival at a barrier, or a thread that returned
    Order order;
};
Run *run = nullptr;

// Not instrumented by TSan: it never returns, and its frame would stay on the shadow stack of the context, which the
// next launch reuses. (The worker it calls is instrumented, and returns.)
__attribute__((no_sanitize("thread"))) void fiber_main() {
    unsigned t;
    Run *launch;
    {
        Untracked u;
        launch = run;
        finish_switch(nullptr, &launch->launcher_bottom, &launch->launcher_size);
        t = launch->running;
    }
    acquire(launch->order.begun); // what the launcher released before the run happens before the thread
    if (launch->order.after) acquire(launch->order.after);
    (*launch->worker)(t);
    Run &r = *launch;
    const void *bottom;
    size_t size;
    void *launcher_tsan;
    {
        Untracked u;
        r.fibers[t].done = true;
        r.progress = true;
        bottom = r.launcher_bottom, size = r.launcher_size, launcher_tsan = r.launcher_tsan;
    }
    // The thread happens before what acquires `ended`; nothing of the run (on the launcher's stack) is read after
    // this, or TSan would see the launcher reuse that stack as a race.
    release(r.order.ended);
    start_switch(nullptr, bottom, size); // null: this fiber's fake stack goes with it
    tsan_switch(launcher_tsan);
    Context finished;
    switch_context(finished, r.launcher); // never resumed
    std::abort();
}

// From a fiber waiting at a barrier: back to the launcher, which resumes the next fiber.
void yield() {
    Untracked u;
    Run &r = *run;
    Fiber &f = r.fibers[r.running];
    start_switch(&f.fake_stack, r.launcher_bottom, r.launcher_size);
    tsan_switch(r.launcher_tsan);
    switch_context(f.context, r.launcher);
    finish_switch(f.fake_stack, &r.launcher_bottom, &r.launcher_size);
}

} // namespace

#if defined(__SANITIZE_THREAD__)
Untracked::Untracked() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
}
Untracked::~Untracked() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
}
#else
Untracked::Untracked() {}
Untracked::~Untracked() {}
#endif

Barrier::Barrier(std::ptrdiff_t count, std::function<void()> on_completion)
    : on_completion_(std::move(on_completion)), expected_(count) {}

void Barrier::complete(char *sync) {
    acquire(sync); // every arrival's work happens before the completion
    {
        Untracked u;
        arrived_ = 0;
        ++phase_;
    }
    if (on_completion_) on_completion_();
    release(sync); // and the completion's before what follows the barrier
}

void Barrier::arrive_and_wait() {
    uint64_t phase;
    bool last;
    char *sync;
    {
        Untracked u;
        run->progress = true;
        phase = phase_;
        sync = &sync_[phase % 2];
        last = ++arrived_ == expected_;
    }
    release(sync);
    if (last) complete(sync);
    for (bool waiting = !last; waiting;) {
        yield();
        Untracked u;
        waiting = phase_ == phase;
    }
    acquire(sync);
}

void Barrier::arrive_and_drop() {
    bool last;
    char *sync;
    {
        Untracked u;
        run->progress = true;
        sync = &sync_[phase_ % 2];
        last = arrived_ == --expected_;
    }
    release(sync);
    if (last) complete(sync);
}

#if defined(__SANITIZE_THREAD__)
void release(void *a) { __tsan_release(a); }
void acquire(void *a) { __tsan_acquire(a); }
bool blocks_apart() { return true; }
#else
void release(void *) {}
void acquire(void *) {}
bool blocks_apart() { return false; }
#endif

void reserve_threads(unsigned first, unsigned count, unsigned n) {
    for (unsigned p = first; p < std::min(first + count, kPools); ++p)
        for (unsigned t = unsigned(pools[p].size()); t < n; ++t) take_slot(p, t);
}

void run_threads(unsigned n, const std::function<void(unsigned)> &worker,
                 const std::function<void(unsigned)> &switch_to, const Order &order) {
    if (run) {
        std::fprintf(stderr, "emu: a launch from inside a kernel\n");
        std::abort();
    }
    reserve_threads(order.pool % kPools, 1, n); // (none made if the launcher reserved them)
    // The launcher's bookkeeping goes untracked (the fibers are tracked, each in its own TSan context, created
    // outside this: a fiber created while its creator ignores accesses would ignore them too).
    Untracked u;
    Run r;
    r.worker = &worker;
    r.order = order;
    r.launcher_tsan = tsan_current();
    r.fibers.resize(n);
    for (unsigned t = 0; t < n; ++t) {
        Fiber &f = r.fibers[t];
        const Slot slot = take_slot(order.pool % kPools, t);
        f.stack = slot.stack, f.tsan = slot.tsan;
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
            switch_to(t);
            start_switch(&r.launcher_fake_stack, f.stack, kStackBytes);
            tsan_switch(f.tsan);
            switch_context(r.launcher, f.context);
            finish_switch(r.launcher_fake_stack, nullptr, nullptr);
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
}

} // namespace emu
