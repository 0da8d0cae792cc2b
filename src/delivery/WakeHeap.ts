/**
 * WakeHeap — a binary min-heap of `(at, value)` wake-ups, earliest first. Internal to the delivery
 * queue: one timer fiber sleeps until the earliest wake instead of one sleeping fiber per recipient.
 * push and pop are O(log n); stale entries are the caller's to skip.
 */

/** One scheduled wake: `value` is due at `at` (epoch ms). */
export interface Wake<A> {
  readonly at: number
  readonly value: A
}

/** A min-heap of wakes ordered by `at`. */
export class WakeHeap<A> {
  private readonly items: Array<Wake<A>> = []

  get size(): number {
    return this.items.length
  }

  /** The earliest wake, left in place. */
  peek(): Wake<A> | undefined {
    return this.items[0]
  }

  push(at: number, value: A): void {
    const items = this.items
    const wake: Wake<A> = { at, value }
    items.push(wake)
    let i = items.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (items[parent].at <= at) break
      items[i] = items[parent]
      i = parent
    }
    items[i] = wake
  }

  /** Removes and returns the earliest wake. */
  pop(): Wake<A> | undefined {
    const items = this.items
    const top = items[0]
    const last = items.pop()
    if (items.length > 0 && last !== undefined) {
      const n = items.length
      let i = 0
      for (;;) {
        const l = 2 * i + 1
        if (l >= n) break
        const r = l + 1
        const c = r < n && items[r].at < items[l].at ? r : l
        if (items[c].at >= last.at) break
        items[i] = items[c]
        i = c
      }
      items[i] = last
    }
    return top
  }
}
