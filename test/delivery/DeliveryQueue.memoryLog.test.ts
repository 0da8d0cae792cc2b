/** The in-memory log used by the DeliveryQueue tests, held to the store-independent DeliveryLog contract. */
import { deliveryLogContract } from "./contract.js"
import { makeMemoryLogScoped } from "./memoryLog.js"

deliveryLogContract("memory log (test double)", makeMemoryLogScoped)
