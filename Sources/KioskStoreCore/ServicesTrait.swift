// The store's targets (this domain first: everything of the store builds on it) need Kiosk's default trait: their
// dependencies (GRDB, postgres-nio, …) come with it. Without it (a package depending on Kiosk with `traits: []` for the
// SDK alone, asking for KioskTesting) this says so, instead of "no such module".
#if !Services
#error("the store and KioskTesting need Kiosk's default trait Services: depend on Kiosk without traits: []")
#endif
