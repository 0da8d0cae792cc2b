/**
 * Migration `0010_ingress_owners`: where each runner process takes HTTP requests, by its fencing token
 * (`<prefix>_shard_epochs.owner`, Fencing.ts), so an ingress can send a run straight to the ingress of
 * its shard's owner (Hop.ts).
 */
export const ingressOwnersSql = (prefix: string): ReadonlyArray<string> => [
  `CREATE TABLE ${prefix}_ingress_owners (
        owner text PRIMARY KEY, url text NOT NULL, registered_at bigint NOT NULL)`
]
