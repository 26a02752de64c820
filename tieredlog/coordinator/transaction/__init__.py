"""The transaction coordinator: transactional ids' state in `__transaction_state` and the markers that
end their transactions (`coordinator.TransactionCoordinator`)."""
