public enum KioskRPCPlaceholder {}
