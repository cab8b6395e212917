// The cycles taken by a core's issue slots, for the compiled timing pass
// (emulator/_timing_core.pyx): one array with open addressing (taking a slot allocates
// nothing; std::unordered_set made a node a slot), and each taken cycle pointing at a cycle
// at or past the next free one (a union-find "next free slot" with path compression), so
// that the first free cycle from I is found without walking every taken cycle after I, as
// the Python model's ``while I in issued: I += 1`` does (same answer).
#pragma once
#include <cstdint>
#include <vector>

class CycleSet {
    static constexpr int64_t EMPTY = INT64_MIN;
    std::vector<int64_t> keys_, next_;
    std::vector<size_t> path_;
    size_t n_ = 0;
    size_t mask_ = 0;

    static size_t hash(int64_t x) { return (size_t)((uint64_t)x * 0x9E3779B97F4A7C15ULL >> 17); }

    // The slot of x, or of the empty place where it would go.
    size_t find(int64_t x) const {
        size_t i = hash(x) & mask_;
        while (keys_[i] != EMPTY && keys_[i] != x) i = (i + 1) & mask_;
        return i;
    }

    void rebuild(size_t cap, int64_t floor) {
        std::vector<int64_t> ok, on;
        ok.swap(keys_);
        on.swap(next_);
        keys_.assign(cap, EMPTY);
        next_.assign(cap, 0);
        mask_ = cap - 1;
        n_ = 0;
        for (size_t i = 0; i < ok.size(); ++i)
            if (ok[i] != EMPTY && ok[i] >= floor) put(ok[i], on[i]);
    }

    void put(int64_t x, int64_t nx) {
        size_t i = find(x);
        if (keys_[i] == EMPTY) ++n_;
        keys_[i] = x;
        next_[i] = nx;
    }

public:
    CycleSet() { rebuild(64, 0); }

    size_t size() const { return n_; }

    // The first cycle from I not taken; takes it.
    int64_t take_from(int64_t I) {
        path_.clear();
        size_t i = find(I);
        while (keys_[i] != EMPTY) {
            path_.push_back(i);
            I = next_[i];
            i = find(I);
        }
        for (size_t p : path_) next_[p] = I + 1;  // each points past the cycle now taken
        if (2 * (n_ + 1) > keys_.size()) {
            rebuild(2 * keys_.size(), INT64_MIN + 1);
            i = find(I);
        }
        keys_[i] = I;
        next_[i] = I + 1;
        ++n_;
        return I;
    }

    // Drop the cycles below `floor` (no later request starts below it).
    void keep_from(int64_t floor) {
        size_t kept = 0, cap = 64;
        for (int64_t x : keys_)
            if (x != EMPTY && x >= floor) ++kept;
        while (2 * (kept + 1) > cap) cap *= 2;
        rebuild(cap, floor);
    }
};
