/**
 * A capacity group: one budget of running activations over several lanes schedulers. A member
 * starts an activation only when it has a slot of its own and the group has one; a freed group
 * slot goes to the member whose oldest startable waiter has waited longest (an enqueue sequence
 * shared by the members). Internal to `src/queue`.
 */

/** What a group asks of one member (a lanes scheduler). */
export interface GroupMember {
  /** The enqueue sequence of the member's longest waiter if it could start now (slot free, not paused). */
  readonly startable: () => number | undefined
  /** Starts the member's next waiter; the caller checked `startable`. */
  readonly startNext: () => void
}

/** The shared budget of a group's lanes. */
export class CapacityGroup {
  /** Activations running across the members. */
  running = 0
  /** The members' shared enqueue sequence (orders waiters across lanes). */
  seq = 0
  readonly members: Array<GroupMember> = []
  constructor(readonly name: string, public concurrent: number) {}

  /** Gives free group slots to the longest waiters among the members, one at a time. */
  pump(): void {
    while (this.running < this.concurrent) {
      let best: GroupMember | undefined
      let bestSeq = Number.POSITIVE_INFINITY
      for (const m of this.members) {
        const s = m.startable()
        if (s !== undefined && s < bestSeq) {
          bestSeq = s
          best = m
        }
      }
      if (best === undefined) return
      best.startNext()
    }
  }

  /** `member` leaves the group (its lane was removed). */
  leave(member: GroupMember): void {
    const i = this.members.indexOf(member)
    if (i >= 0) this.members.splice(i, 1)
  }
}
