/**
 * `queuedAhead(task)`: how many tasks of the lane will start before a waiting task, as things
 * stand, for `onWait`. Internal to `src/queue` (part of the engine; below it: `state.ts`).
 *
 * The lane's start rule, replayed on what waits now: keys take turns in the order the lanes queue
 * them (a key that runs now queues its follow-up at the tail, after those), one start per turn, a
 * key's own tasks in admission order; once the lane has seen a priority, each turn goes to the key
 * whose next task ranks highest (`priority + floor(waitedMs / agingMs)`, as of now; ties: first in
 * that order). Later admissions, aging and a group's other lanes can still change it.
 */
import { QUEUED } from "../lanes/entry.js"
import type { KeyTasks, LaneState, Task } from "./state.js"

/** The tasks of the lane that will start before `task` (which waits); see the module comment. */
export function queuedAhead(task: Task): number {
  const lane = task.laneState
  const ks = task.keyTasks ?? lane.keys.get(task.key)
  if (ks === undefined) return 0
  return lane.prioritized ? rankedAhead(lane, ks, task) : turnsAhead(lane, ks, task)
}

/**
 * Without priorities the turns go round: a task with `p` tasks of its key before it starts in
 * round `p`, after `min(waiting, p)` tasks of every key and, in its own round, one task of each
 * key before its own in the turn order that still has one then. With `p` = 0 (the usual case)
 * that is the keys before its own: O(keys ahead); otherwise O(tasks ahead).
 */
function turnsAhead(lane: LaneState, ks: KeyTasks, task: Task): number {
  let p = 0
  for (let t = task.prev; t !== undefined; t = t.prev) p++
  if (p === 0 && ks.state === QUEUED) {
    // the queued keys before it in the FIFO (one with nothing left to start takes no turn)
    let n = 0
    for (let e = ks.prev as KeyTasks | undefined; e !== undefined; e = e.prev as KeyTasks | undefined) {
      if (e.head !== undefined) n++
    }
    return n
  }
  let ahead = 0
  let before = true
  // the turn order: the queued keys, then the others that hold a task (map order)
  for (let e = lane.lanes.queuedHead() as KeyTasks | undefined; e !== undefined; e = e.next as KeyTasks | undefined) {
    if (e === ks) {
      if (p === 0) return ahead
      before = false
    } else ahead += startsBefore(e, p, before)
  }
  for (const e of lane.keys.values()) {
    if (e.state === QUEUED) continue
    if (e === ks) {
      if (p === 0) return ahead
      before = false
    } else ahead += startsBefore(e, p, before)
  }
  return ahead + p
}

/** How many of `e`'s waiting tasks start before round `p`'s turn of a key after it (`before`: or before it). */
const startsBefore = (e: KeyTasks, p: number, before: boolean): number => {
  let n = 0
  for (let t = e.head; t !== undefined && n <= p; t = t.next) n++
  return n > p ? p + (before ? 1 : 0) : n
}

/** A task's effective priority at `now`, as the lanes rank a key's head (`ranking` in makeLane.ts). */
const rankAt = (t: Task, now: number, agingMs: number): number =>
  (t.options?.priority ?? 0) + Math.floor((now - t.admittedAt) / agingMs)

/**
 * With priorities, for a key's next task (the usual case): every task that beats it (a higher
 * rank, or the same rank and an earlier place in the turn order) starts before it, whatever their
 * order, and nothing else does. A key's next task beats it by rank, or by its key's place before
 * the task's own key on a tie; each of that key's later tasks takes a new, last place, so beats it
 * only by a higher rank. O(keys + tasks ahead); a task further back: `replayAhead`.
 */
function rankedAhead(lane: LaneState, ks: KeyTasks, task: Task): number {
  if (task.prev !== undefined) return replayAhead(lane, task)
  const now = lane.engine.now()
  const agingMs = lane.limits.agingMs
  const rank = rankAt(task, now, agingMs)
  let ahead = 0
  let before = true
  const beating = (e: KeyTasks): number => {
    let t = e.head
    if (t === undefined) return 0
    const first = rankAt(t, now, agingMs)
    if (first < rank || (first === rank && !before)) return 0
    let n = 1
    for (t = t.next; t !== undefined && rankAt(t, now, agingMs) > rank; t = t.next) n++
    return n
  }
  for (let e = lane.lanes.queuedHead() as KeyTasks | undefined; e !== undefined; e = e.next as KeyTasks | undefined) {
    if (e === ks) before = false
    else ahead += beating(e)
  }
  for (const e of lane.keys.values()) {
    if (e.state === QUEUED) continue
    if (e === ks) before = false
    else ahead += beating(e)
  }
  return ahead
}

/**
 * With priorities, for a task with tasks of its key before it: the turns replayed on a heap of
 * each key's next task, ordered by rank (higher first) and place in the turn order (a key that
 * took its turn goes to the tail: a new, last place). O(keys + tasks ahead × log keys).
 */
function replayAhead(lane: LaneState, task: Task): number {
  const now = lane.engine.now()
  const agingMs = lane.limits.agingMs
  const heap = new TurnHeap()
  let place = 0
  for (let e = lane.lanes.queuedHead() as KeyTasks | undefined; e !== undefined; e = e.next as KeyTasks | undefined) {
    if (e.head !== undefined) heap.push(e.head, rankAt(e.head, now, agingMs), place++)
  }
  for (const e of lane.keys.values()) {
    if (e.state !== QUEUED && e.head !== undefined) heap.push(e.head, rankAt(e.head, now, agingMs), place++)
  }
  let ahead = 0
  for (let t = heap.pop(); t !== undefined; t = heap.pop()) {
    if (t === task) return ahead
    ahead++
    if (t.next !== undefined) heap.push(t.next, rankAt(t.next, now, agingMs), place++)
  }
  return ahead
}

/** A binary heap of tasks: highest rank first, then lowest place. */
class TurnHeap {
  private readonly tasks: Array<Task> = []
  private readonly ranks: Array<number> = []
  private readonly places: Array<number> = []

  private first(i: number, j: number): boolean {
    const ri = this.ranks[i]!
    const rj = this.ranks[j]!
    return ri > rj || (ri === rj && this.places[i]! < this.places[j]!)
  }

  private swap(i: number, j: number): void {
    const t = this.tasks[i]!
    this.tasks[i] = this.tasks[j]!
    this.tasks[j] = t
    const r = this.ranks[i]!
    this.ranks[i] = this.ranks[j]!
    this.ranks[j] = r
    const p = this.places[i]!
    this.places[i] = this.places[j]!
    this.places[j] = p
  }

  push(task: Task, rank: number, place: number): void {
    let i = this.tasks.length
    this.tasks.push(task)
    this.ranks.push(rank)
    this.places.push(place)
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (!this.first(i, parent)) break
      this.swap(i, parent)
      i = parent
    }
  }

  pop(): Task | undefined {
    const n = this.tasks.length
    if (n === 0) return undefined
    const top = this.tasks[0]!
    this.swap(0, n - 1)
    this.tasks.pop()
    this.ranks.pop()
    this.places.pop()
    const size = n - 1
    let i = 0
    for (;;) {
      const l = 2 * i + 1
      if (l >= size) break
      const c = l + 1 < size && this.first(l + 1, l) ? l + 1 : l
      if (!this.first(c, i)) break
      this.swap(c, i)
      i = c
    }
    return top
  }
}
