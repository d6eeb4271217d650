from memory_core.core import errors


def test_every_error_derives_from_the_root_and_is_found_by_name():
    types = errors.error_types()
    assert types["MemorySetNotFound"] is errors.MemorySetNotFound
    assert types["TransientStoreError"] is errors.TransientStoreError
    assert all(issubclass(cls, errors.MemoryCoreError) for cls in types.values())


def test_validation_errors_are_also_value_errors():
    assert issubclass(errors.InvalidRequestError, ValueError)
    assert issubclass(errors.ConfigurationError, ValueError)
