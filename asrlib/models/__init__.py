from asrlib.models.lstm import LstmpLayer, StackedLstmAcousticModel, build_model

__all__ = ["LstmpLayer", "StackedLstmAcousticModel", "build_model"]
