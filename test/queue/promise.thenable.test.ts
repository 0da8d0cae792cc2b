/**
 * A Promise task may return any thenable, not only a native promise. One that calls back
 * synchronously inside `then`, calls back twice, or throws from `then` must settle its task once and
 * leave its key free for the next task (a synchronous callback used to end the task inside its own
 * start and leave the key stuck).
 */
import { afterEach, describe, expect, it } from "vitest"
import { cleanUp, make } from "./promise.helpers.js"

afterEach(cleanUp)

/**
 * The typed API takes `A | Promise<A>`; a JavaScript caller (or a library's query object, such as
 * Mongoose's) hands over other thenables: typed here as the promise they stand for.
 */
const thenable = <A>(then: (ok: (a: A) => void, err: (e: unknown) => void) => void): Promise<A> =>
  ({ then }) as unknown as Promise<A>
/** A thenable that calls `onFulfilled` at once, inside `then`. */
const syncValue = <A>(value: A): Promise<A> => thenable<A>((ok) => ok(value))
/** A thenable that calls `onRejected` at once, inside `then`. */
const syncError = (error: unknown): Promise<never> => thenable<never>((_ok, err) => err(error))

describe("Promise tasks returning thenables", () => {
  it("thenables that call back synchronously: every task of the key settles, in order, and the key takes the next task", async () => {
    const q = await make()
    const ran: Array<number> = []
    const futures = Array.from({ length: 12 }, (_, i) =>
      q.dispatch("main", "k", () => {
        ran.push(i)
        return i % 3 === 2 ? syncError(new Error(`no ${i}`)) : syncValue(i)
      }))
    const outcomes = await Promise.allSettled(futures.map((f) => f.result))
    expect(ran).toEqual(Array.from({ length: 12 }, (_, i) => i))
    expect(outcomes.map((o) => (o.status === "fulfilled" ? o.value : (o.reason as Error).message))).toEqual(
      Array.from({ length: 12 }, (_, i) => (i % 3 === 2 ? `no ${i}` : i))
    )
    expect(await q.dispatch("main", "k", async () => "next").result).toBe("next")
    expect(q.snapshot()[0]).toMatchObject({ lane: "main", running: 0, waiting: 0, keys: 0 })
  })

  it("native promises and synchronous thenables mixed on one key, and on many keys", async () => {
    const q = await make()
    const futures = Array.from(
      { length: 40 },
      (_, i) => q.dispatch("main", `k${i % 4}`, () => (i % 2 === 0 ? Promise.resolve(i) : syncValue(i)))
    )
    expect(await Promise.all(futures.map((f) => f.result))).toEqual(Array.from({ length: 40 }, (_, i) => i))
  })

  it("a thenable that calls back twice settles once (its first call); one whose then throws rejects with the throw", async () => {
    const q = await make()
    const twice = thenable<number>((ok, err) => {
      ok(1)
      ok(2)
      err(new Error("late"))
    })
    const throws = thenable<number>(() => {
      throw new Error("then threw")
    })
    const a = q.dispatch("main", "k", () => twice)
    const b = q.dispatch("main", "k", () => throws)
    const c = q.dispatch("main", "k", async () => 3)
    expect(await a.result).toBe(1)
    await expect(b.result).rejects.toThrow("then threw")
    expect(await c.result).toBe(3)
  })
})
